#!/bin/bash
# Device call of the 2026-12-02 evening session (1x H200, torch 2.11), after bench/h200_batch11.sh: watch's invariants
# with the parameters' rows kept as views across steps (the working tree) against HEAD's tree (.whl/head.tar), then
# the whole catalog as a timeline with workers forked from the fork server (TORCHSLEUTH_WORKER_START=forkserver),
# stopped by its time limit like runs D-F.
set -u
OUT=${1:?out dir}
W=/tmp/batch12; rm -rf $W; mkdir -p $W/old
tar xf .whl/head.tar -C $W/old
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
NEW=$PWD
for tree in new old; do
  src=$NEW/src; [ $tree = old ] && src=$W/old/src
  echo "### $tree" >> $OUT/watch.txt
  PYTHONPATH=/tmp/site:$src:$NEW/tests/scenarios timeout 70 python3 bench/watch_cuda.py --overhead-only --quick --steps 30 --long 300 >> $OUT/watch.txt 2>&1
done
export PYTHONPATH=/tmp/site:$NEW/src
TORCHSLEUTH_WORKER_START=forkserver timeout ${SECONDS_LEFT:-430} python3 bench/catalog_timeline.py --device cuda --out $W/g > $OUT/timeline.txt 2>&1
python3 bench/catalog_timeline.py --read $W/g > $OUT/read.txt 2>&1
gzip -c $W/g/timeline.jsonl > $OUT/timeline.jsonl.gz
