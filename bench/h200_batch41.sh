#!/bin/bash
# Run in the tenth session (bench/cuda-sweep.md, "Values the CPU refuses, and run AB"): bench/h200_batch40.sh $OUT (the
# whole catalog with `torchsleuth ops --device cuda --no-shrink`, the kernel's log after it), then the CUDA test of
# tests/test_refused.py; the small files go back in one tarball (a call returns at most eight files).
#   bash bench/h200_batch41.sh $OUT
set -u
OUT=${1:?out dir}
bash bench/h200_batch40.sh $OUT
PYTHONPATH=/tmp/site:$PWD/src timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_refused.py > $OUT/pytest_refused.txt 2>&1
cd $OUT && tar czf small.tgz started.txt cache_before.txt machine.txt apps.csv ctx.txt command_tail.txt 2>/dev/null
rm -f started.txt cache_before.txt machine.txt apps.csv ctx.txt command_tail.txt
exit 0
