#!/bin/bash
# Device call of the 2026-12-03 (third) session (1x H200, torch 2.11): a case's tensors laid out on the host and moved
# in one copy each (run.transfer.placed), the working tree, against HEAD's tree (.whl/head.tar). First the CUDA half
# of tests/test_transfer.py; then every 10th op of the default selection (the hanging special.laguerre/legendre left
# out) as a timeline, new/old/new/old, and whether the runs' statuses and findings agree; last, device ops per case
# (bench/kernels.py) for both trees.
set -u
OUT=${1:?out dir}
W=/tmp/batch21; rm -rf $W; mkdir -p $W/old
tar xf .whl/head.tar -C $W/old
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
NEW=$PWD
PYTHONPATH=/tmp/site:$NEW/src timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_transfer.py > $OUT/tests.txt 2>&1
OPS=$(PYTHONPATH=/tmp/site:$NEW/src python3 -c "
import sys; sys.path.insert(0, 'bench')
from sweep_profile import op_sample
print(','.join(o for o in op_sample(None, 10) if 'laguerre' not in o and 'legendre' not in o))")
echo "ops: $OPS" > $OUT/subset.txt
for run in ${RUNS:-new1 old1 new2 old2}; do
  src=$NEW/src; [ ${run#old} != $run ] && src=$W/old/src
  PYTHONPATH=/tmp/site:$src timeout 95 python3 bench/catalog_timeline.py --device cuda --ops "$OPS" --out $W/$run > /dev/null 2>&1
  echo "### $run" >> $OUT/subset.txt
  PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --read $W/$run 2>&1 | sed -n '1,4p' >> $OUT/subset.txt
done
for pair in "new1 old1" "new2 old2"; do
  PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --compare $W/${pair% *} $W/${pair#* } >> $OUT/subset.txt 2>&1
done
for tree in new old; do
  src=$NEW/src; [ $tree = old ] && src=$W/old/src
  echo "### $tree" >> $OUT/kernels.txt
  PYTHONPATH=/tmp/site:$src timeout 55 python3 bench/kernels.py --device cuda --seconds ${KERNEL_SECONDS:-25} --out $W/k-$tree >> $OUT/kernels.txt 2>/dev/null
done
