"""How many CUDA API calls a case makes, and how busy they keep the GPU: what bounds a CUDA sweep with many workers.

The in-process profile (sweep_profile.py) says a CUDA case costs 6.8 ms of one process, and the pool stops scaling
past 4 workers while the workers' CPU time grows 6-fold. Two explanations predict different numbers here: if the GPU
is saturated by many tiny kernels and copies from all the workers, a case's GPU busy time times the pool's cases/s
is near 1 s per second; if not, the workers contend for something else (host CPUs, the driver).

    python bench/cuda_calls_per_case.py --ops SPEC --out DIR     # on the GPU machine

One process, ``workers=0``, catalog depth, no shrink, under ``torch.profiler`` (CPU and CUDA activities): per case,
the kernel launches, memory copies and synchronizations the CUDA runtime saw, and the GPU time of the kernels and
copies. Writes DIR/calls.md and prints it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from torchsleuth import SweepConfig, resolve_ops, sweep
from torchsleuth.sweep import depth

KINDS = {
    "kernel launches": ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"),
    "memory copies": ("cudaMemcpyAsync", "cudaMemcpy", "cuMemcpyAsync"),
    "memsets": ("cudaMemsetAsync", "cuMemsetD8Async", "cuMemsetD32Async"),
    "synchronizations": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"),
    "allocations": ("cudaMalloc", "cudaFree", "cudaHostAlloc"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="add,sum,matmul,softmax,addcmul,cdist,diff,hstack,any,unsqueeze")
    parser.add_argument("--device", default="cuda", help="cuda (cpu only checks that the script runs: it counts nothing)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    config = depth(SweepConfig(ops=resolve_ops(args.ops), device=args.device, workers=0, shrink=False), deep=False)
    sweep(SweepConfig(ops=resolve_ops("add"), dtypes=("float32",), device=args.device, workers=0, shrink=False), db=tempfile.mktemp())  # warm
    started = time.perf_counter()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        result = sweep(config, db=tempfile.mktemp())
    wall = time.perf_counter() - started
    cases = sum(result.statuses.values())
    events = prof.key_averages()
    counts = {kind: sum(e.count for e in events if e.key in names) for kind, names in KINDS.items()}
    api_us = {kind: sum(e.cpu_time_total for e in events if e.key in names) for kind, names in KINDS.items()}
    gpu_us = sum(getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0) for e in events
                 if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    lines = [f"# CUDA calls per case: {name}", "", "```sh", "python " + " ".join(sys.argv), "```", "",
             f"torch {torch.__version__}; ops {args.ops}; {cases:,} cases in {wall:.1f} s under the profiler (it slows the host side); "
             f"statuses {dict(result.statuses)}.", "",
             "| per case | count | host µs in the call |", "| --- | ---: | ---: |"]
    lines += [f"| {kind} | {counts[kind] / cases:.1f} | {api_us[kind] / cases:.0f} |" for kind in KINDS]
    lines += ["", f"GPU busy (kernels, copies, memsets on the device): **{gpu_us / cases:.0f} µs per case**; at 747 cases/s (15 workers) "
              f"that is {gpu_us / cases * 747 / 1e6:.2f} s of GPU time per second."]
    text = "\n".join(lines) + "\n"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "calls.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
