#!/bin/bash
# Run in the eleventh session (bench/cuda-sweep.md, "Runs AD and AE"; bench/watch-overhead.md, "Measured again on the
# tree of 2026-12-04"): bench/h200_batch41.sh $OUT (the whole catalog with `torchsleuth ops --device cuda --no-shrink`,
# the kernel's log, tests/test_refused.py), then watch's cost on CUDA as bench/h200_batch20.sh measures it (per step
# after the first 30, watch_cuda.py; 300 steps after 20, the settings interleaved, median of 5, watch_hooks.py).
#   bash bench/h200_batch42.sh $OUT
set -u
OUT=${1:?out dir}
bash bench/h200_batch41.sh $OUT
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests/scenarios
timeout 90 python3 bench/watch_cuda.py --overhead-only --quick --steps 30 --long 300 > $OUT/watch_cuda.txt 2>&1
timeout 120 python3 bench/watch_hooks.py --device cuda --steps 300 --repeats 5 > $OUT/watch_hooks.txt 2>&1
cd $OUT && tar czf watch.tgz watch_cuda.txt watch_hooks.txt pytest_refused.txt && rm -f watch_cuda.txt watch_hooks.txt pytest_refused.txt
exit 0
