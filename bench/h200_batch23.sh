#!/bin/bash
# Device call of the 2026-12-03 (third) session (1x H200, torch 2.11): the whole default catalog as a timeline with
# the working tree (outcomes indexed by unit in the store; tensors laid out on the host), as runs C-H were made
# (bench/h200_batch15.sh), and py-spy on the parent process (the pool's dispatcher and the store) from 240 to 270 s.
set -u
OUT=${1:?out dir}
W=/tmp/batch23; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
SPY=/tmp/site/bin/py-spy; [ -x $SPY ] || SPY=$(find /tmp/site -name py-spy -type f | head -1)
timeout ${SECONDS_LIMIT:-540} python3 bench/catalog_timeline.py --device cuda --out $W/run > $W/stdout.txt 2>&1 &
sleep 240
P=$(pgrep -f "catalog_timeline.py --device cuda" | head -1)
timeout 60 $SPY record -p $P -d 30 --idle -r 100 -f raw -o $OUT/parent_spy.txt > /dev/null 2>&1
wait
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
cp $W/run/timeline.jsonl $W/run/summary.json $W/stdout.txt $OUT/ 2>/dev/null
