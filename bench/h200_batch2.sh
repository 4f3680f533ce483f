#!/bin/bash
# The second device call of this session (2x H200): the watch overhead on a quiet core,
# shard on real NCCL over a set of ops, the large-size oracle again (every ufunc's first
# sample with values to tile). Everything lands in OUT/batch2.tgz.
set -u
OUT=${1:?out dir}
W=/tmp/batch2; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
TS="python3 -m torchsleuth.cli.main"
taskset -c 2 python3 bench/watch_overhead.py --steps 30 --repeats 7 \
    --settings "invariants only;shadow, each distinct call once (default)" > $W/watch-overhead.txt 2>&1
UFUNCS=$(python3 -c 'from torchsleuth.cases import opinfo; print(",".join(n for n, e in opinfo.catalog().items() if {"UnaryUfuncInfo", "BinaryUfuncInfo"} & {c.__name__ for c in type(e).__mro__}))')
(timeout 200 python3 -m torch.distributed.run --nproc-per-node 2 -m torchsleuth.cli.main shard --backend nccl --device cuda --mesh 2 \
    --ops 'composite.*,softmax,sum,mean,mm,cat,stack,transpose,select,fft.irfft,nn.functional.layer_norm' \
    --json $W/shard-nccl.json --out $W/shard-nccl > $W/shard-nccl.txt 2>&1; echo "exit $?" >> $W/shard-nccl.txt) &
(CUDA_VISIBLE_DEVICES=0 timeout 250 $TS ops --device cuda --oracles large --variants functional --layouts contiguous \
    --dtypes float32,float16 --ops "$UFUNCS" --workers 1 --no-progress --out $W/large --json $W/large.json \
    > $W/large.txt 2>&1; echo "exit $?" >> $W/large.txt) &
wait
tar czf $OUT/batch2.tgz -C /tmp batch2
