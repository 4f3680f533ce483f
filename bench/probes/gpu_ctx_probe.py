"""How long a new process takes to make its CUDA context and run a first kernel, beside what a catalog run has on the GPU.

A whole-catalog run on an H200 (bench/cuda-sweep.md, run U) saw that probe take 0.2-0.7 s early in the run and 3-23 s
late in it, where the attention ops crash case after case. This tells the causes apart, phase by phase: the GPU idle;
16 processes busy with small kernels and synchronizations (as the workers are); 4 processes faulting the GPU in a
loop (a fresh process each time, a misaligned address in ``_flash_attention_forward``, as those units do); both.
Those did not reproduce it (bench/cuda-sweep.md), so two more phases do what the pool does to its workers: processes
killed with SIGKILL while a kernel runs (a hang set aside), and processes killed with SIGKILL just after their kernel
faulted the device (a worker that lost its device is killed as it is replaced).

    python3 bench/probes/gpu_ctx_probe.py [--seconds 25] [--out DIR] [PHASE ...]   # phases by number, 1-7; all by default
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import _out

PROBE = ("import time, torch; t = time.time(); torch.zeros(1, device='cuda'); torch.cuda.synchronize(); "
         "print(f'{time.time() - t:.2f}', flush=True)")
BUSY = ("import time, torch; x = torch.randn(64, 64, device='cuda'); end = time.time() + {s}\n"
        "while time.time() < end:\n    (x @ x).sum().item()")
FAULT = ("import torch; q = torch.randn(1 * 128 * 8 * 64 + 1, dtype=torch.half, device='cuda')[1:].view(1, 128, 8, 64)\n"
         "torch.ops.aten._flash_attention_forward(q, q, q, None, None, 128, 128, 0.0, False, False)\n"
         "torch.cuda.synchronize()")
SPIN = ("import sys, torch; torch.cuda._sleep(1 << 40); print('ready', flush=True); sys.stdin.read()")  # a kernel that runs on
FAULTED = ("import sys, torch; q = torch.randn(1 * 128 * 8 * 64 + 1, dtype=torch.half, device='cuda')[1:].view(1, 128, 8, 64)\n"
           "try:\n    torch.ops.aten._flash_attention_forward(q, q, q, None, None, 128, 128, 0.0, False, False)\n"
           "    torch.cuda.synchronize()\nexcept Exception:\n    pass\nprint('ready', flush=True); sys.stdin.read()")
KILLS = ("import signal, subprocess, sys, time; end = time.time() + {s}; n = 0\n"
         "while time.time() < end:\n"
         "    p = subprocess.Popen([sys.executable, '-c', {child!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n"
         "    p.stdout.readline(); time.sleep(0.5); p.send_signal(signal.SIGKILL); p.wait(); n += 1\n"
         "print('killed', n, flush=True)")
FAULTS = ("import subprocess, sys, time; end = time.time() + {s}; n = 0\n"
          "while time.time() < end:\n"
          "    r = subprocess.run([sys.executable, '-c', {fault!r}], capture_output=True, text=True); n += 1\n"
          "print('faulting processes', n, (r.stderr.strip().splitlines() or ['exit ' + str(r.returncode)])[-1][:120], flush=True)")


def phase(name: str, seconds: float, busy: int, faulting: int, spinning_killed: int = 0, faulted_killed: int = 0) -> None:
    others = [subprocess.Popen([sys.executable, "-c", BUSY.format(s=seconds + 10)]) for _ in range(busy)]
    others += [subprocess.Popen([sys.executable, "-c", FAULTS.format(s=seconds + 10, fault=FAULT)]) for _ in range(faulting)]
    others += [subprocess.Popen([sys.executable, "-c", KILLS.format(s=seconds + 10, child=SPIN)]) for _ in range(spinning_killed)]
    others += [subprocess.Popen([sys.executable, "-c", KILLS.format(s=seconds + 10, child=FAULTED)]) for _ in range(faulted_killed)]
    time.sleep(5)  # the others' imports and contexts made
    took, end = [], time.time() + seconds
    while time.time() < end:
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True).stdout.strip()
        took.append(float(out) if out else float("nan"))
        time.sleep(1)
    print(f"{name}: context and first kernel {sorted(took)} s (median {sorted(took)[len(took) // 2]:.2f})", flush=True)
    for process in others:
        process.wait()


PHASES = [
    ("the GPU idle", dict(busy=0, faulting=0)),
    ("16 processes busy with small kernels", dict(busy=16, faulting=0)),
    ("4 processes faulting the GPU in a loop", dict(busy=0, faulting=4)),
    ("both", dict(busy=16, faulting=4)),
    ("4 processes killed in a loop with a kernel running", dict(busy=0, faulting=0, spinning_killed=4)),
    ("4 processes killed in a loop after their kernel faulted", dict(busy=0, faulting=0, faulted_killed=4)),
    ("16 busy, and 4 killed with a kernel running and 4 after a fault", dict(busy=16, faulting=0, spinning_killed=4, faulted_killed=4)),
]

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phases", nargs="*", type=int, help="phases by number, 1-7 (default all)")
    parser.add_argument("--seconds", type=float, default=25.0, help="seconds a phase (25)")
    parser.add_argument("--out", metavar="DIR", help="also write what it prints to DIR/ctx-probe.txt")
    args = parser.parse_args()
    with _out.tee(args.out, "ctx-probe.txt"):
        for number in args.phases or range(1, len(PHASES) + 1):
            name, others = PHASES[number - 1]
            phase(name, args.seconds, **others)


if __name__ == "__main__":
    main()
