#!/bin/bash
# Device call of the 2026-12-03 (second) session (1x H200, torch 2.11): where does the pool's plateau come from?
# Every 10th op of the default selection (the hanging special.laguerre/legendre left out) as a timeline: 16 workers
# with the kernel cache cold, then warm; 8 and 4 workers; then the same under NVIDIA MPS (the daemon stopped after).
set -u
OUT=${1:?out dir}
W=/tmp/batch17; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
{ nproc; lscpu | grep -E "^(Thread|Core|Socket|Model name|CPU\(s\))"; nvidia-smi --query-gpu=name,compute_mode --format=csv; which nsys ncu nvidia-cuda-mps-control; } > $OUT/machine.txt 2>&1
OPS=$(python3 -c "
import sys; sys.path.insert(0, 'bench')
from sweep_profile import op_sample
print(','.join(o for o in op_sample(None, 10) if 'laguerre' not in o and 'legendre' not in o))")
echo "ops: $OPS" > $OUT/subset.txt
run() {  # name workers
  timeout 100 python3 bench/catalog_timeline.py --device cuda --ops "$OPS" --workers $2 --out $W/$1 > /dev/null 2>&1
  echo "### $1" >> $OUT/subset.txt
  python3 bench/catalog_timeline.py --read $W/$1 2>&1 | sed -n '1,4p' >> $OUT/subset.txt
}
run cold16 16; run warm16 16; run warm8 8; run warm4 4
nvidia-cuda-mps-control -d && echo "mps started" >> $OUT/subset.txt
run mps16 16; run mps8 8
echo quit | nvidia-cuda-mps-control; sleep 2
run after16 16
python3 bench/catalog_timeline.py --compare $W/warm16 $W/mps16 >> $OUT/subset.txt 2>&1
