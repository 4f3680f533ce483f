#!/bin/bash
# Device call of the 2026-12-02 evening session (1x H200, torch 2.11): is the fork server safe to fork from beside
# the GPU now (the preload's own check, then bench/worker_start.py), and what watch's invariants cost a step on the
# GPU before (HEAD's tree in .whl/head.tar) and after (the working tree) reading every parameter's positions as
# views in one copy: bench/watch_cuda.py --overhead-only --quick, old/new/old/new in turn.
set -u
OUT=${1:?out dir}
W=/tmp/batch11; rm -rf $W; mkdir -p $W/old
tar xf .whl/head.tar -C $W/old
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
NEW=$PWD
PYTHONPATH=/tmp/site:$NEW/src timeout 60 python3 -c "
import time; t = time.time()
import torch, torchsleuth.sweep, torchsleuth.workers.preload as p
print('torch', torch.__version__, 'FORK_SAFE', p.FORK_SAFE, 'CATALOG', p.CATALOG, 'initialized', torch.cuda.is_initialized(), f'{time.time() - t:.1f} s')
" > $OUT/probe.txt 2>&1
PYTHONPATH=/tmp/site:$NEW/src timeout 200 python3 bench/worker_start.py --device cuda --rounds 1 --replacements 4 > $OUT/worker_start.txt 2>&1
for tree in old new old new; do
  src=$NEW/src; [ $tree = old ] && src=$W/old/src
  echo "### $tree" >> $OUT/watch.txt
  PYTHONPATH=/tmp/site:$src:$NEW/tests/scenarios timeout 110 python3 bench/watch_cuda.py --overhead-only --quick --steps 30 --long 300 >> $OUT/watch.txt 2>&1
done
