"""Two processes beside an NVIDIA MPS server: does one survive the other's device fault?

    python3 bench/probes/mps_fault.py work & python3 bench/probes/mps_fault.py fault; wait

``work`` runs 2048x2048 matmuls for 8 s; ``fault`` faults the device after 3 s: ``--how wild-store`` stores to a wild
address from a Triton kernel (an illegal address), ``--how assert`` indexes past a tensor's end (a device-side
assert). Run both as MPS clients, then both outside the server (``CUDA_MPS_PIPE_DIRECTORY`` pointed where no server
listens, as ``devices.outside_mps`` does for a sweep's workers), with the daemon started before
(``nvidia-cuda-mps-control -d``) and stopped after (``echo quit | nvidia-cuda-mps-control``): bench/cuda-sweep.md,
"NVIDIA MPS". Each prints one line (``--out DIR``: appended to DIR/mps-fault.txt too).
"""

import argparse
import os
import sys
import time


def fault(how: str) -> str:
    import torch

    time.sleep(3)
    x = torch.zeros(4, device="cuda")
    try:
        if how == "assert":
            x[torch.tensor([1 << 40], device="cuda")] = 1
        else:
            import triton
            import triton.language as tl

            @triton.jit
            def wild(p):
                tl.store(p + (1 << 40), 1.0)

            wild[(1,)](x)
        torch.cuda.synchronize()
        return "fault: no error"
    except Exception as e:
        return f"fault: {type(e).__name__} {str(e).splitlines()[0]}"


def work() -> str:
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    n = 0
    end = time.time() + 8
    try:
        while time.time() < end:
            a = (a @ a).tanh_()
            torch.cuda.synchronize()
            n += 1
        return f"worker: survived, {n} matmuls"
    except Exception as e:
        return f"worker: died after {n} matmuls: {type(e).__name__} {str(e).splitlines()[0]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=("work", "fault"))
    parser.add_argument("--how", choices=("wild-store", "assert"), default="wild-store", help="the fault (wild-store)")
    parser.add_argument("--out", metavar="DIR")
    args = parser.parse_args()
    said = work() if args.role == "work" else fault(args.how)
    print(said, flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "mps-fault.txt"), "a") as f:
            f.write(said + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
