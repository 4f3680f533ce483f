#!/bin/bash
# Device call of the 2026-12-03 (seventh) session (1x H200, torch 2.11): what ten hanging kernels cost the pool's other
# workers. The sample of h200_batch22.sh (every 10th op of the default selection, the hanging polynomials left out;
# 16 workers) three times: alone (A), beside ten processes each keeping a hanging kernel on the GPU and waiting for it
# by polling with sleeps (B: the device's share only), and beside ten that wait in torch.cuda.synchronize() (C: the
# driver spins a host core each, as a worker does). bench/gpu_hanger.py is the hanging process. Read: subset.txt.
set -u
OUT=${1:?out dir}
W=/tmp/batch35; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
OPS=$(python3 -c "
import sys; sys.path.insert(0, 'bench')
from sweep_profile import op_sample
print(','.join(o for o in op_sample(None, 10) if 'laguerre' not in o and 'legendre' not in o))")
hangers() {
  for i in $(seq 10); do python3 bench/gpu_hanger.py $1 > $W/hanger_$1_$i.txt 2>&1 & done
  sleep 8
  ps -o pid,pcpu,etime,args -C python3 | grep gpu_hanger > $W/ps_$1.txt
}
for run in A B C; do
  case $run in B) hangers poll ;; C) hangers spin ;; esac
  timeout 100 python3 bench/catalog_timeline.py --device cuda --ops "$OPS" --out $W/$run > /dev/null 2>&1
  ps -o pid,pcpu,etime,args -C python3 | grep gpu_hanger >> $W/ps_after_$run.txt
  pkill -9 -f gpu_hanger.py; sleep 2
  echo "### $run" >> $OUT/subset.txt
  python3 bench/catalog_timeline.py --read $W/$run 2>&1 | sed -n '1,12p' >> $OUT/subset.txt
done
cat $W/ps_*.txt $W/hanger_*_1.txt > $OUT/hangers.txt 2>&1
nvidia-smi -q | grep -i -A3 "timeslice\|compute mode" >> $OUT/hangers.txt 2>&1
