#!/bin/bash
# bench/unreached-overloads.md: a run pointed at six ops (`--depth deep`) with the tree before cases/unreached.py (a
# worktree at BEFORE_REV) and with this one, side by side, twice in turn; each run's wall seconds, cases and findings.
#   bash bench/unreached_cost.sh BEFORE_REV OUT_DIR
set -u
REV=${1:?the revision before}
OUT=${2:?an output directory}
OPS=${OPS:-norm,isin,fill,scatter,squeeze_copy,view}
mkdir -p $OUT
rm -rf $OUT/before-tree && git worktree add -f --detach $OUT/before-tree $REV > /dev/null 2>&1
for round in 1 2; do
  for which in before after; do
    src=$PWD/src
    [ $which = before ] && src=$OUT/before-tree/src
    rm -rf $OUT/$which$round
    start=$(date +%s.%N)
    PYTHONPATH=$src .venv/bin/torchsleuth ops --depth deep --ops $OPS --out $OUT/$which$round --json $OUT/$which$round/f.json \
      --no-progress > $OUT/$which$round.txt 2>&1
    end=$(date +%s.%N)
    .venv/bin/python - "$OUT/$which$round/f.json" "$which" "$round" "$start" "$end" <<'PY'
import collections, json, sys
path, which, round_, start, end = sys.argv[1:]
d = json.load(open(path))
ops = collections.Counter(f["op"] for f in d["findings"])
print(f"{which} {round_}: {float(end) - float(start):.1f} s wall, {d['cases']:,} cases, {len(d['findings'])} findings, "
      f"coverage {d['coverage']['reached']} of {d['coverage']['found']}; by op: {dict(sorted(ops.items()))}")
PY
  done
done
git worktree remove --force $OUT/before-tree
