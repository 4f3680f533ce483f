#!/bin/bash
# Run in the eighth session (bench/cuda-sweep.md, "The end's cold workers, and run U"): bench/h200_batch36.sh
# (`torchsleuth ops --device cuda --no-shrink` itself, the whole catalog timed from the process's start) as two calls back
# to back on one machine: `bash bench/h200_batch38.sh $OUT 1` with a fresh kernel cache (run T1), then `... $OUT 2` with
# the first's (T2; run S's case: from its last unit on, new workers could not use the GPU); `$OUT 1` again on fresh
# machines with trees be4470a (T3) and 00e9bda (U). nvidia-smi samples the compute processes every 2 s beside the run
# (apps.csv: how many device contexts are alive at once). For U a loop beside it timed a fresh process's context start:
#   (while true; do python3 -c "import time,torch; t=time.time(); torch.zeros(1,device='cuda'); \
#      torch.cuda.synchronize(); print(f'{time.time():.1f} {time.time()-t:.2f}', flush=True)" >> $OUT/ctx.txt; sleep 8; done) &
set -u
OUT=${1:?out dir}
N=${2:-1}
W=/tmp/batch38_$N; rm -rf $W; mkdir -p $W
[ "$N" = 1 ] && rm -rf /tmp/kernels38
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src PYTORCH_KERNEL_CACHE_PATH=/tmp/kernels38
mkdir -p $PYTORCH_KERNEL_CACHE_PATH; ls $PYTORCH_KERNEL_CACHE_PATH | wc -l > $OUT/cache_before.txt
nvidia-smi --query-compute-apps=timestamp,pid,used_memory --format=csv,noheader -l 2 > $OUT/apps.csv 2>&1 &
SMI=$!
timeout ${SECONDS_LIMIT:-420} python3 bench/catalog_timeline.py --device cuda --out $W/run --command > $W/stdout.txt 2>&1
kill $SMI
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
tail -30 $W/stdout.txt > $OUT/command_tail.txt
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json run/runs.db run/stalls.txt run/procs.jsonl run/runs.workers.log stdout.txt 2>/dev/null
