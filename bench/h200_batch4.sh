#!/bin/bash
# Device call 1 of the 2026-11-30 session (1x H200, torch 2.11): the compile oracle over the
# catalog on CUDA, and the unexplained NCCL layer_norm finding replayed on gloo and simulated.
set -u
OUT=${1:?out dir}
W=/tmp/batch4; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
LN='--ops nn.functional.layer_norm --mesh 2 --variants backward --dtypes float32'
(timeout 200 python3 -m torch.distributed.run --nproc-per-node 2 -m torchsleuth.cli.main shard --backend gloo $LN \
    --json $W/ln-gloo.json --out $W/ln-gloo > $W/ln-gloo.txt 2>&1; echo "exit $?" >> $W/ln-gloo.txt
 timeout 200 python3 -m torchsleuth.cli.main shard $LN --workers 2 --no-progress \
    --json $W/ln-local.json --out $W/ln-local > $W/ln-local.txt 2>&1; echo "exit $?" >> $W/ln-local.txt) &
(/usr/bin/time -v timeout ${COMPILE_S:-480} python3 -m torchsleuth.cli.main ops --device cuda --compile --dtypes float32,bfloat16,float16 \
    --samples 2 --variants functional --layouts contiguous --workers 14 --no-progress \
    --out $W/compile --json $W/compile.json > $W/compile.txt 2>&1; echo "exit $?" >> $W/compile.txt) &
wait
rm -rf $W/*/repros
tar czf $OUT/batch4.tgz -C /tmp batch4
