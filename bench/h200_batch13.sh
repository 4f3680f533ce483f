#!/bin/bash
# Device call of the 2026-12-02 evening session (1x H200, torch 2.11), after bench/h200_batch12.sh: watch's invariants
# with the cadence (the working tree: every step of the first 16, then within 5% of the step time) against HEAD's
# tree (.whl/head.tar: every step checked, rows read as views), new/old/new/old; then the start method a CUDA sweep
# picks by default now, and a pointed sweep's executor note. Run twice: as it is, then after the budget went from 5% to 2%
# with WATCH_ONLY=1 TREES="new old new" (the second call).
set -u
OUT=${1:?out dir}
W=/tmp/batch13; rm -rf $W; mkdir -p $W/old
tar xf .whl/head.tar -C $W/old
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
NEW=$PWD
for tree in ${TREES:-new old new old}; do
  src=$NEW/src; [ $tree = old ] && src=$W/old/src
  echo "### $tree" >> $OUT/watch.txt
  PYTHONPATH=/tmp/site:$src:$NEW/tests/scenarios timeout 70 python3 bench/watch_cuda.py --overhead-only --quick --steps 30 --long 300 >> $OUT/watch.txt 2>&1
done
export PYTHONPATH=/tmp/site:$NEW/src
[ -n "${WATCH_ONLY:-}" ] && exit 0
python3 -c "from torchsleuth.workers.pool import default_start; print('default start beside cuda:', default_start('cuda'))" > $OUT/pointed.txt 2>&1
timeout 150 python3 -m torchsleuth.cli.main ops --device cuda --ops abs,addcmul --no-progress --out $W/p >> $OUT/pointed.txt 2>&1
echo "exit $?" >> $OUT/pointed.txt
