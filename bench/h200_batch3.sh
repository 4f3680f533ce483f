#!/bin/bash
# The third device call of this session (2x H200): shard after the triage's fixes, on real
# NCCL (the same ops as batch 2) and simulated over the whole catalog on 24 CPU workers.
set -u
OUT=${1:?out dir}
W=/tmp/batch3; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
(timeout 150 python3 -m torch.distributed.run --nproc-per-node 2 -m torchsleuth.cli.main shard --backend nccl --device cuda --mesh 2 \
    --ops 'composite.*,softmax,sum,mean,mm,cat,stack,transpose,select,fft.irfft,nn.functional.layer_norm' \
    --json $W/shard-nccl.json --out $W/shard-nccl > $W/shard-nccl.txt 2>&1; echo "exit $?" >> $W/shard-nccl.txt) &
(timeout 200 python3 -m torchsleuth.cli.main shard --workers 24 --gloo 16 --no-progress --out $W/shard-cat \
    --json $W/shard-cat.json > $W/shard-cat.txt 2>&1; echo "exit $?" >> $W/shard-cat.txt) &
wait
rm -rf $W/*/repros
tar czf $OUT/batch3.tgz -C /tmp batch3
