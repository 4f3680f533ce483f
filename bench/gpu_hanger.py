"""A process that keeps one kernel running on the GPU for as long as it lives, as a hang's replay does.

    python bench/gpu_hanger.py poll     # waits for the kernel by asking the device every 10 ms, sleeping between
    python bench/gpu_hanger.py spin     # waits in torch.cuda.synchronize(), as a worker does (the driver spins a core)

The kernel is the triaged hang of bench/search-findings.md: `special.laguerre_polynomial_l` of degree 2^52 + 1, whose
O(n) recurrence runs for days. bench/h200_batch35.sh starts ten of these beside a sweep to measure what hanging
kernels cost the pool's other workers, on the device and on the host. Kill it to end it.
"""

import sys
import time

import torch

wait = sys.argv[1] if len(sys.argv) > 1 else "poll"
x = torch.full((5,), 0.5, dtype=torch.float64, device="cuda")
degree = torch.full_like(x, 2.0**52 + 1)
torch.cuda.synchronize()
torch.special.laguerre_polynomial_l(x, degree)
print(f"launched at {time.time():.3f}", flush=True)
if wait == "spin":
    torch.cuda.synchronize()
else:
    event = torch.cuda.Event()
    event.record()
    while not event.query():
        time.sleep(0.01)
