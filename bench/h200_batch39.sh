#!/bin/bash
# Run in the ninth session (bench/cuda-sweep.md, "Run V, and what kills a context's start"): the whole catalog with
# `torchsleuth ops --device cuda --no-shrink` itself (bench/h200_batch38.sh $OUT 1: a fresh kernel cache, timed from the
# process's start), a loop beside it timing a fresh process's CUDA context every 8 s (ctx.txt), then the context-start
# probe's phases 1, 5, 6 and 7 (the GPU idle; processes SIGKILLed with a kernel running; SIGKILLed after a fault; both
# beside 16 busy processes).
#   bash bench/h200_batch39.sh $OUT [PROBE_SECONDS]
set -u
OUT=${1:?out dir}
PROBE=${2:-12}
(while true; do python3 -c "import time,torch; t=time.time(); torch.zeros(1,device='cuda'); \
torch.cuda.synchronize(); print(f'{time.time():.1f} {time.time()-t:.2f}', flush=True)" >> $OUT/ctx.txt 2>&1; sleep 8; done) &
LOOP=$!
date +%s.%N > $OUT/started.txt
bash bench/h200_batch38.sh $OUT 1
kill $LOOP
[ "$PROBE" != 0 ] && timeout 200 python3 bench/gpu_ctx_probe.py $PROBE 1 5 6 7 > $OUT/probe.txt 2>&1
exit 0
