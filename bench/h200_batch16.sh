#!/bin/bash
# Device call of the 2026-12-03 session (1x H200, torch 2.11), after bench/h200_batch15.sh: the tail of a sweep whose
# last units crash case after case. Every 20th op of the default selection (the hanging special.laguerre/legendre
# left out), among them torch.ops.aten._flash_attention_forward (its float16 and bfloat16 units crash about 13 times
# each, and come among the last in the ops' order), as a timeline: HEAD's tree (.whl/head.tar: one worker per unit to its end, four
# spares) against the working tree (a unit's rest split among the idle workers once no unit is left to hand out,
# half the workers kept as spares then), old/new.
set -u
OUT=${1:?out dir}
W=/tmp/batch16; rm -rf $W; mkdir -p $W/old
tar xf .whl/head.tar -C $W/old
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
NEW=$PWD
OPS=$(PYTHONPATH=/tmp/site:$NEW/src python3 -c "
import sys; sys.path.insert(0, 'bench')
from sweep_profile import op_sample
print(','.join(o for o in op_sample(None, 20) if 'laguerre' not in o and 'legendre' not in o))")
echo "ops: $OPS" > $OUT/tail.txt
for run in ${RUNS:-old new}; do
  src=$NEW/src; [ $run = old ] && src=$W/old/src
  PYTHONPATH=/tmp/site:$src timeout ${RUN_SECONDS:-200} python3 bench/catalog_timeline.py --device cuda --ops "$OPS" --out $W/$run > /dev/null 2>&1
  echo "### $run" >> $OUT/tail.txt
  PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --read $W/$run 2>&1 | sed -n '1,8p;/collateral/p' >> $OUT/tail.txt
  gzip -c $W/$run/timeline.jsonl > $OUT/timeline-$run.jsonl.gz
done
PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --compare $W/old $W/new >> $OUT/tail.txt 2>&1
