#!/bin/bash
# Device call of the 2026-12-03 (fourth) session (1x H200, torch 2.11): the whole default catalog as a timeline with
# the working tree (the branch catalog-in-fork-server: OpInfo's catalog loaded in the pool's fork server beside the
# GPU), as run I was made (bench/h200_batch23.sh); then what a worker reads of the catalog loaded so and loaded as a
# worker loads it after making its context (bench/catalog_fingerprint.py), and whether the server stayed safe to
# fork from. bench/h200_batch26.sh ran the tree before (.whl/head.tar) right after, on the same machine.
set -u
OUT=${1:?out dir}
W=/tmp/batch25; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${SECONDS_LIMIT:-460} python3 bench/catalog_timeline.py --device cuda --out $W/run > $W/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
for how in preload context; do
  timeout 60 python3 bench/catalog_fingerprint.py $how $W/fp_$how.json >> $OUT/fingerprint.txt 2>&1
done
python3 -c "
import json; a, b = (json.load(open('$W/fp_%s.json' % h)) for h in ('preload', 'context'))
differ = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
print(len(a), 'ops;', len(differ), 'differ:', differ[:20])" >> $OUT/fingerprint.txt 2>&1
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json run/runs.db stdout.txt 2>/dev/null
