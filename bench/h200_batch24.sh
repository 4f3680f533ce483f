#!/bin/bash
# Device call of the 2026-12-03 (third) session (1x H200, torch 2.11): OpInfo's catalog loaded in the pool's fork
# server beside the GPU (workers.preload as on the branch catalog-in-fork-server, not landed: the compute capability from
# NVML, every other question for the device refused). Ran with RUNS=new (the device time was running out).
# First what a worker reads of the catalog, loaded so and loaded as a worker loads it after making its context
# (bench/catalog_fingerprint.py), and whether the server stayed safe to fork from; then every 10th op of the default
# selection as a timeline with the working tree and with HEAD's (.whl/head.tar), and whether they agree.
set -u
OUT=${1:?out dir}
W=/tmp/batch24; rm -rf $W; mkdir -p $W/old
tar xf .whl/head.tar -C $W/old
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
NEW=$PWD
for how in preload context; do
  PYTHONPATH=/tmp/site:$NEW/src timeout 70 python3 bench/catalog_fingerprint.py $how $W/fp_$how.json >> $OUT/fingerprint.txt 2>&1
done
python3 -c "
import json; a, b = (json.load(open('$W/fp_%s.json' % h)) for h in ('preload', 'context'))
differ = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
print(len(a), 'ops;', len(differ), 'differ:', differ[:20])" >> $OUT/fingerprint.txt 2>&1
OPS=$(PYTHONPATH=/tmp/site:$NEW/src python3 -c "
import sys; sys.path.insert(0, 'bench')
from sweep_profile import op_sample
print(','.join(o for o in op_sample(None, 10) if 'laguerre' not in o and 'legendre' not in o))")
for run in ${RUNS-new old}; do
  src=$NEW/src; [ ${run#old} != $run ] && src=$W/old/src
  PYTHONPATH=/tmp/site:$src timeout 80 python3 bench/catalog_timeline.py --device cuda --ops "$OPS" --out $W/$run > /dev/null 2>&1
  echo "### $run" >> $OUT/subset.txt
  PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --read $W/$run 2>&1 | sed -n '1,5p' >> $OUT/subset.txt
done
PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --compare $W/new $W/old >> $OUT/subset.txt 2>&1
