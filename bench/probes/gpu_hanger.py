"""A process that keeps one kernel running on the GPU for as long as it lives, as a hang's replay does.

    python3 bench/probes/gpu_hanger.py poll     # waits for the kernel by asking the device every 10 ms, sleeping between
    python3 bench/probes/gpu_hanger.py spin     # waits in torch.cuda.synchronize(), as a worker does (the driver spins a core)

The kernel is the triaged hang of bench/search-findings.md: `special.laguerre_polynomial_l` of degree 2^52 + 1, whose
O(n) recurrence runs for days. bench/cuda-sweep.md ("Hanging kernels beside the pool") started ten of these beside a
sweep to measure what hanging kernels cost the pool's other workers, on the device and on the host:

    for i in $(seq 10); do python3 bench/probes/gpu_hanger.py poll --out "$OUT/hangers" & done; sleep 8
    python3 bench/run.py catalog --device cuda --every 10 --exclude laguerre,legendre --out "$OUT/B"

Kill it to end it.
"""

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wait", nargs="?", choices=("poll", "spin"), default="poll")
    parser.add_argument("--out", metavar="DIR", help="write when the kernel was launched to DIR/hanger-PID.txt")
    args = parser.parse_args()
    import torch

    x = torch.full((5,), 0.5, dtype=torch.float64, device="cuda")
    degree = torch.full_like(x, 2.0**52 + 1)
    torch.cuda.synchronize()
    torch.special.laguerre_polynomial_l(x, degree)
    said = f"launched at {time.time():.3f}, waiting ({args.wait})"
    print(said, flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"hanger-{os.getpid()}.txt"), "w") as f:
            f.write(said + "\n")
    if args.wait == "spin":
        torch.cuda.synchronize()
    else:
        event = torch.cuda.Event()
        event.record()
        while not event.query():
            time.sleep(0.01)


if __name__ == "__main__":
    main()
