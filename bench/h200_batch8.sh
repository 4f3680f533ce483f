#!/bin/bash
# Device call of the 2026-12-02 session (1x H200, torch 2.11), on a clean tree (git archive HEAD in .whl/head.tar:
# the device copies the working tree, so work in progress would ride along):
#   1. the large oracle's creation form: factories past 2^31 and 2^32 elements;
#   2. a pointed run (deep: every sample, the searches, the cheap oracles, autodiff and vmap among them) over a few ops.
set -u
OUT=${1:?out dir}
W=/tmp/batch8; rm -rf $W; mkdir -p $W/tree
tar xf .whl/head.tar -C $W/tree
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$W/tree/src PYTHONUNBUFFERED=1
cd $W
(/usr/bin/time -v timeout ${CREATION_S:-200} python3 -m torchsleuth.cli.main ops --device cuda --large creation \
  --ops arange,linspace,linspace.tensor_overload,logspace,logspace.tensor_overload,full,ones,zeros,full_like,ones_like,new_full,new_ones,eye,tril_indices,triu_indices,randint,randint_like \
  --dtypes float32,float16,bfloat16,int64,int32,bool --variants functional --layouts contiguous \
  --workers 1 --no-progress --no-shrink --out $W/creation --json $W/creation.json > $W/creation.txt 2>&1; echo "exit $?" >> $W/creation.txt)
(/usr/bin/time -v timeout ${DEEP_S:-300} python3 -m torchsleuth.cli.main ops --device cuda \
  --ops ${OPS:-exp,sinh,cumsum,softmax,addcmul,logsumexp,nn.functional.layer_norm,nn.functional.gelu} --depth deep \
  --workers 8 --no-progress --no-shrink --out $W/deep --json $W/deep.json > $W/deep.txt 2>&1; echo "exit $?" >> $W/deep.txt)
python3 - "$OUT" <<'PY'
import gzip, json, sqlite3, sys
out = sys.argv[1]
for name in ("creation", "deep"):
    try:
        d = json.load(open(f"/tmp/batch8/{name}.json"))
        d["findings"] = [{k: f.get(k) for k in ("op", "opinfo", "kind", "variant", "dtype", "summary", "reference", "case_id", "group")} for f in d["findings"]]
    except FileNotFoundError:  # timed out: read the store
        c = sqlite3.connect(f"/tmp/batch8/{name}/runs.db")
        d = {"statuses": c.execute("select status, count(*), sum(seconds) from outcomes group by status").fetchall(),
             "units": c.execute("select state, count(*) from units group by state").fetchall(),
             "findings": [json.loads(r)["summary"] + " | " + cid for cid, r in c.execute("select case_id, record from findings")]}
    json.dump(d, gzip.open(f"{out}/{name}.json.gz", "wt"))
PY
cp $W/*.txt $OUT/
