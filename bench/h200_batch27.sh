#!/bin/bash
# Device call of the 2026-12-03 (fourth) session (1x H200, torch 2.11): workers that wait for the GPU asleep
# (devices.blocking_waits, the working tree) against workers that spin as CUDA chooses (HEAD's tree, .whl/head.tar;
# both start the fork server before the sweep plans, workers.starts.begin). First the CUDA tests of tests/test_waits.py and
# tests/test_transfer.py; then every 10th op of the default selection (the hanging special.laguerre/legendre left
# out) as a timeline, new/old/new/old, and whether the runs agree; last the whole default catalog with the working
# tree, as run I was made (bench/h200_batch23.sh). The blocking waits were slower and were not landed (the tree's
# devices.blocking_waits and tests/test_waits.py are described in bench/cuda-sweep.md, fourth session, item 2).
set -u
OUT=${1:?out dir}
W=/tmp/batch27; rm -rf $W; mkdir -p $W/old
tar xf .whl/head.tar -C $W/old
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
NEW=$PWD
PYTHONPATH=/tmp/site:$NEW/src timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_waits.py tests/test_transfer.py > $OUT/tests.txt 2>&1
OPS=$(PYTHONPATH=/tmp/site:$NEW/src python3 -c "
import sys; sys.path.insert(0, 'bench')
from sweep_profile import op_sample
print(','.join(o for o in op_sample(None, 10) if 'laguerre' not in o and 'legendre' not in o))")
for run in ${RUNS:-new1 old1 new2 old2}; do
  src=$NEW/src; [ ${run#old} != $run ] && src=$W/old/src
  PYTHONPATH=/tmp/site:$src timeout 80 python3 bench/catalog_timeline.py --device cuda --ops "$OPS" --out $W/$run > /dev/null 2>&1
  echo "### $run" >> $OUT/subset.txt
  PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --read $W/$run 2>&1 | sed -n '1,5p' >> $OUT/subset.txt
done
for pair in "new1 old1" "new2 old2"; do
  PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --compare $W/${pair% *} $W/${pair#* } 2>&1 | head -12 >> $OUT/subset.txt
done
export PYTHONPATH=/tmp/site:$NEW/src
timeout ${SECONDS_LIMIT:-330} python3 bench/catalog_timeline.py --device cuda --out $W/run > $W/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json stdout.txt 2>/dev/null
