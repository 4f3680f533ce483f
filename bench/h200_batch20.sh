#!/bin/bash
# Device call of the 2026-12-03 (second) session (1x H200, torch 2.11): watch's cost on CUDA re-measured on the tree
# of now (after 38f86d3, a step within a step told by the stack): per step after the first 30 (watch_cuda.py), and
# 300 steps after 20, the settings interleaved, median of 5 (watch_hooks.py).
set -u
OUT=${1:?out dir}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests/scenarios
timeout 90 python3 bench/watch_cuda.py --overhead-only --quick --steps 30 --long 300 > $OUT/watch_cuda.txt 2>&1
timeout 120 python3 bench/watch_hooks.py --device cuda --steps 300 --repeats 5 > $OUT/watch_hooks.txt 2>&1
cat $OUT/watch_cuda.txt $OUT/watch_hooks.txt
