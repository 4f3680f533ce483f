#!/bin/bash
# Device call of the 2026-12-02 afternoon session (1x H200, torch 2.11), on a clean tree (git archive HEAD in
# .whl/head.tar): torchsleuth.check off the CPU (a custom op that ignores strides, and its correct twin, on cuda), and
# ops beyond OpInfo on cuda (aten._masked_softmax, which reads a transposed input as contiguous on the CPU of 2.13).
set -u
OUT=${1:?out dir}
W=/tmp/batch10; rm -rf $W; mkdir -p $W/tree
tar xf .whl/head.tar -C $W/tree
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$W/tree/src:$W/tree/tests PYTHONUNBUFFERED=1
cd $W
timeout 240 python3 - > $OUT/check.txt 2>&1 <<'PY'
import time, torch, torchsleuth, check_ops
print("torch", torch.__version__, torch.cuda.get_device_name())
for op in (check_ops.scale_bad, check_ops.scale_good):
    start = time.time()
    r = torchsleuth.check(op, [(torch.randn(4, 6), 2.5), (torch.randn(3, 5, 2), -1.25)], device="cuda", dtypes="float32,bfloat16")
    print(f"{r.op}: {r.sweep.cases} cases in {time.time() - start:.1f} s, {dict(r.sweep.statuses)}")
    print(r.message())
PY
echo "exit $?" >> $OUT/check.txt
timeout 300 python3 -m torchsleuth.cli.main ops --device cuda --ops aten._masked_softmax --workers 4 --no-progress \
  --out $W/masked --json $OUT/masked.json > $OUT/masked.txt 2>&1; echo "exit $?" >> $OUT/masked.txt
