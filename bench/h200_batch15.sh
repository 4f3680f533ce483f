#!/bin/bash
# Device call of the 2026-12-03 session (1x H200, torch 2.11), after bench/h200_batch14.sh: the whole catalog as a
# timeline (runs C-G's command) with the working tree: a unit's rest split among idle workers once no unit is left to
# hand out (workers.dispatch), half the workers kept as spares then (workers.pool), a case set aside after a fifth of its time.
set -u
OUT=${1:?out dir}
W=/tmp/batch15; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${SECONDS_LEFT:-470} python3 bench/catalog_timeline.py --device cuda --out $W/h > $OUT/timeline.txt 2>&1
python3 bench/catalog_timeline.py --read $W/h > $OUT/read.txt 2>&1
gzip -c $W/h/timeline.jsonl > $OUT/timeline.jsonl.gz
gzip -c $W/h/runs.db > $OUT/runs.db.gz
