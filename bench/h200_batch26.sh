#!/bin/bash
# Device call of the 2026-12-03 (fourth) session (1x H200, torch 2.11), right after bench/h200_batch25.sh on the same
# machine: the whole default catalog as a timeline with the tree before (.whl/head.tar: main, the catalog loaded by
# each worker beside the GPU), read by the working tree's bench/catalog_timeline.py, and compared with batch 25's run
# (carried back as .whl/run25.tgz).
set -u
OUT=${1:?out dir}
W=/tmp/batch26; rm -rf $W; mkdir -p $W/old $W/new
tar xf .whl/head.tar -C $W/old
tar xzf .whl/run25.tgz -C $W/new
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
PYTHONPATH=/tmp/site:$W/old/src timeout ${SECONDS_LIMIT:-500} python3 bench/catalog_timeline.py --device cuda --out $W/run > $W/stdout.txt 2>&1
export PYTHONPATH=/tmp/site:$PWD/src
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
python3 bench/catalog_timeline.py --compare $W/new/run $W/run > $OUT/compare.txt 2>&1
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json stdout.txt 2>/dev/null
