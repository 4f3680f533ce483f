#!/bin/bash
# Run in the tenth session (bench/cuda-sweep.md, "What the machine does while the workers are silent: run Z"): the whole
# catalog as bench/h200_batch39.sh $OUT 0 runs it (the command itself, a fresh kernel cache, a fresh process's context
# timed every 8 s beside it), its harness now sampling every process's threads (bench/proc_sampler.py: procs.jsonl in
# run.tgz), with the kernel's log and how the machine writes core dumps after it.
#   bash bench/h200_batch40.sh $OUT
set -u
OUT=${1:?out dir}
bash bench/h200_batch39.sh $OUT 0
(id; ulimit -c; cat /proc/sys/kernel/core_pattern; cat /proc/sys/kernel/yama/ptrace_scope; uname -r
 cat /proc/driver/nvidia/version; cat /proc/driver/nvidia/params 2>/dev/null | head -80) > $OUT/machine.txt 2>&1
dmesg -T > $OUT/dmesg.txt 2>&1 || true
exit 0
