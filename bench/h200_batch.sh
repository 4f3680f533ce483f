#!/bin/bash
# One device call on the 2x H200 machine (32 cores): what this session ran there.
#   the watch overhead on a quiet CPU core first; then, side by side:
#   shard's catalog simulated on 24 CPU workers, shard on real NCCL (2 GPUs),
#   the large-size oracle on GPU 0 and the sizes oracle on GPU 1.
# Usage (from the repository root on the device): bash bench/h200_batch.sh OUTDIR
set -u
OUT=${1:?out dir}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
TS="python3 -m torchsleuth.cli.main"
nproc > "$OUT/machine.txt"; nvidia-smi -L >> "$OUT/machine.txt"; python3 -c 'import torch; print(torch.__version__)' >> "$OUT/machine.txt"

taskset -c 2 python3 bench/watch_overhead.py --steps 30 --repeats 7 \
    --settings "invariants only;shadow, each distinct call once (default)" > "$OUT/watch-overhead.txt" 2>&1

UFUNCS=$(python3 - <<'PY'
from torchsleuth.cases import opinfo
names = [name for name, e in opinfo.catalog().items()
         if {"UnaryUfuncInfo", "BinaryUfuncInfo"} & {c.__name__ for c in type(e).__mro__}]
print(",".join(names))
PY
)
echo "$UFUNCS" > "$OUT/ufuncs.txt"

(timeout 480 $TS shard --workers 24 --gloo 16 --no-progress --out "$OUT/shard-cat" --json "$OUT/shard-cat.json" \
    > "$OUT/shard-cat.txt" 2>&1; echo "exit $?" >> "$OUT/shard-cat.txt") &
(timeout 420 python3 -m torch.distributed.run --nproc-per-node 2 -m torchsleuth.cli.main shard --backend nccl --device cuda \
    --mesh 2 --no-progress --json "$OUT/shard-nccl.json" --out "$OUT/shard-nccl" > "$OUT/shard-nccl.txt" 2>&1;
    echo "exit $?" >> "$OUT/shard-nccl.txt") &
(CUDA_VISIBLE_DEVICES=0 timeout 450 $TS ops --device cuda --oracles large --variants functional --layouts contiguous \
    --dtypes float32,float16 --ops "$UFUNCS" --workers 1 --no-progress --out "$OUT/large" --json "$OUT/large.json" \
    > "$OUT/large.txt" 2>&1; echo "exit $?" >> "$OUT/large.txt") &
(CUDA_VISIBLE_DEVICES=1 timeout 450 $TS ops --device cuda --oracles sizes --variants functional --layouts contiguous \
    --dtypes float32,float16,bfloat16,int64 --ops "$UFUNCS,sum,mean,amax,amin,argmax,prod,softmax,log_softmax,logsumexp,var,std,norm,cumsum" \
    --workers 4 --no-progress --out "$OUT/sizes" --json "$OUT/sizes.json" > "$OUT/sizes.txt" 2>&1; echo "exit $?" >> "$OUT/sizes.txt") &
wait
cp -r "$OUT"/*/repros "$OUT/" 2>/dev/null
ls -la "$OUT"
