#!/bin/bash
# Device call of the 2026-12-03 (third) session (1x H200, torch 2.11): where the workers' time goes when 16 share the
# GPU. The CUDA half of tests/test_transfer.py again (its byte comparison mended); every 10th op of the default
# selection (as h200_batch21.sh) with py-spy (0.4.3, carried as a wheel in .whl) sampling the parent and every worker
# (Python stacks, idle included, 100 Hz) from 20 s to 40 s; then the old and new trees once more, one after the other.
# Read the workers' files with `python bench/spy_read.py DIR/p_*.txt` (by phase, as bench/cuda-sweep.md tabulates them).
set -u
OUT=${1:?out dir}
W=/tmp/batch22; rm -rf $W; mkdir -p $W/old $W/spy
tar xf .whl/head.tar -C $W/old
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
NEW=$PWD
SPY=/tmp/site/bin/py-spy; [ -x $SPY ] || SPY=$(find /tmp/site -name py-spy -type f | head -1)
[ -n "${SKIP_TESTS:-}" ] || PYTHONPATH=/tmp/site:$NEW/src timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_transfer.py > $OUT/tests.txt 2>&1
OPS=$(PYTHONPATH=/tmp/site:$NEW/src python3 -c "
import sys; sys.path.insert(0, 'bench')
from sweep_profile import op_sample
print(','.join(o for o in op_sample(None, 10) if 'laguerre' not in o and 'legendre' not in o))")
PYTHONPATH=/tmp/site:$NEW/src timeout 100 python3 bench/catalog_timeline.py --device cuda --ops "$OPS" --out $W/spied > /dev/null 2>&1 &
sleep 20
P=$(pgrep -f "catalog_timeline.py --device cuda" | head -1)
desc() { for c in $(pgrep -P $1); do echo $c; desc $c; done; }
ALL="$P $(desc $P)"
ps -o pid,ppid,pcpu,etime,args -p "$(echo $ALL | tr ' ' ',')" > $W/spy/processes.txt
for p in $ALL; do timeout 40 $SPY record -p $p -d 20 --idle -r 100 -f raw -o $W/spy/p_$p.txt > $W/spy/log_$p.txt 2>&1 & done
wait
tar czf $OUT/spy.tgz -C $W spy  # one file: a call brings back only so many
echo "### spied" > $OUT/subset.txt
PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --read $W/spied 2>&1 | sed -n '1,5p' >> $OUT/subset.txt
for run in ${RUNS-old3 new3}; do
  src=$NEW/src; [ ${run#old} != $run ] && src=$W/old/src
  PYTHONPATH=/tmp/site:$src timeout 95 python3 bench/catalog_timeline.py --device cuda --ops "$OPS" --out $W/$run > /dev/null 2>&1
  echo "### $run" >> $OUT/subset.txt
  PYTHONPATH=/tmp/site:$NEW/src python3 bench/catalog_timeline.py --read $W/$run 2>&1 | sed -n '1,5p' >> $OUT/subset.txt
done
