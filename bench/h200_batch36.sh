#!/bin/bash
# Device call of the 2026-12-03 (seventh) session (1x H200, torch 2.11): `torchsleuth ops --device cuda --no-shrink`
# itself, the whole default catalog timed from the process's start (catalog_timeline.py --command), with the tree of
# now (since run Q, bench/h200_batch34.sh: a case setting searched values set aside after 6 s, warm spares started for
# the hangs' replays before the last unit is handed out). CACHE (default: a fresh directory) is torch's kernel cache
# (PYTORCH_KERNEL_CACHE_PATH, where the jiterator keeps the kernels NVRTC compiled): fresh, a first run on a machine;
# given the directory of a run before on the same machine, a run after it.
set -u
OUT=${1:?out dir}
W=/tmp/batch36; rm -rf $W; mkdir -p $W
export PYTORCH_KERNEL_CACHE_PATH=${CACHE:-$W/kernels}
mkdir -p $PYTORCH_KERNEL_CACHE_PATH; ls $PYTORCH_KERNEL_CACHE_PATH | wc -l > $OUT/cache_before.txt
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${SECONDS_LIMIT:-420} python3 bench/catalog_timeline.py --device cuda --out $W/run --command > $W/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
tail -30 $W/stdout.txt > $OUT/command_tail.txt
ls $PYTORCH_KERNEL_CACHE_PATH | wc -l > $OUT/cache_after.txt
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json run/runs.db stdout.txt 2>/dev/null
