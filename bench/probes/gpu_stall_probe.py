"""Whether a CUDA fault in one process stalls every other process on the GPU, and whether the fault or the faulted
process's exit does it.

Whole-catalog runs on an H200 (bench/cuda-sweep.md, runs V-X) saw every worker fall silent at once for about 5 s,
a dozen times a run, each time just after workers lost their device to a device-side assert (`embedding`,
`nll_loss` on invalid indices) and for 2-3 s after misaligned addresses (the attention kernels). This runs 16
processes busy with small kernels (each records when each of its synchronizing steps ended) and, one after another,
processes that fault the GPU and then either stay alive for a while before they exit, exit at once, or are killed
with SIGKILL at once (as the pool does to a worker that lost its device). It prints when each fault and each exit
happened and every pause of the busy processes longer than 0.3 s, on one clock (``time.time()``).

Run on an H200 (bench/cuda-sweep.md, runs V-X): no busy process paused. ``allocations`` is what that left open: busy
processes that allocate pinned and device memory as they go (as the workers' cases do), beside faulting processes that
hold 4 GiB pinned and 16 GiB on the device (as a worker does after minutes of cases), one or four at once, and such
processes that end without a fault.

    python3 bench/probes/gpu_stall_probe.py [allocations] --out DIR       # what it prints, also in DIR/stalls.txt
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time

import _out

BUSY = """
import json, sys, time, torch
x = torch.randn(64, 64, device='cuda'); end = time.time() + float(sys.argv[1]); last = time.time(); pauses = []
allocating = sys.argv[2] == 'allocations'
while time.time() < end:
    if allocating:  # as a worker's cases do, without the caches: a fresh pinned buffer and device block each step
        h = torch.empty(1 << 20, pin_memory=True); d = h.to('cuda', non_blocking=True); del h, d
        torch._C._host_emptyCache(); torch.cuda.empty_cache()
    (x @ x).sum().item()
    now = time.time()
    if now - last > 0.3:
        pauses.append((round(last, 2), round(now - last, 2)))
    last = now
print(json.dumps(pauses), flush=True)
"""

ASSERT = """
import sys, time, torch
w = torch.randn(2, 3, device='cuda'); FAT
torch.cuda.synchronize(); print('ready', flush=True); sys.stdin.readline()
print('fault', round(time.time(), 2), flush=True)
try:
    torch.nn.functional.embedding(torch.tensor([5], device='cuda'), w); torch.cuda.synchronize()
    print('returned', round(time.time(), 2), flush=True)
except Exception as e:
    print('raised', round(time.time(), 2), type(e).__name__, flush=True)
sys.stdin.readline()
"""

MISALIGNED = """
import sys, time, torch
q = torch.randn(1 * 128 * 8 * 64 + 1, dtype=torch.half, device='cuda')[1:].view(1, 128, 8, 64); FAT
torch.cuda.synchronize()
print('ready', flush=True); sys.stdin.readline()
print('fault', round(time.time(), 2), flush=True)
try:
    torch.ops.aten._flash_attention_forward(q, q, q, None, None, 128, 128, 0.0, False, False); torch.cuda.synchronize()
    print('returned', round(time.time(), 2), flush=True)
except Exception as e:
    print('raised', round(time.time(), 2), type(e).__name__, flush=True)
sys.stdin.readline()
"""


# What a worker holds after minutes of cases: pinned host blocks its copies went through (torch caches them) and
# cached device memory; left out (``LEAN``), a process holds its context and a few small tensors.
FAT = ("held = [torch.empty(16 << 20, dtype=torch.uint8, pin_memory=True) for _ in range(256)]; "
       "dev = [torch.empty(64 << 20, dtype=torch.uint8, device='cuda') for _ in range(256)]")
LEAN = "held = dev = None"


def fault(name: str, code: str, hold: float, end: str, fat: bool = False, count: int = 1) -> None:
    """``count`` processes fault the GPU at once, are held ``hold`` seconds, then end: ``exit`` (stdin closed, each
    returns) or ``kill``. ``fat``: each holds 4 GiB of pinned host memory and 16 GiB of device memory first."""
    code = code.replace("FAT", FAT if fat else LEAN)
    processes = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(count)]
    for process in processes:
        process.stdout.readline()  # ready: its context made
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    said = [[process.stdout.readline().strip(), process.stdout.readline().strip()] for process in processes]
    time.sleep(hold)
    ended = time.time()
    for process in processes:
        if end == "kill":
            process.send_signal(signal.SIGKILL)
        else:
            process.stdin.close()
    for process in processes:
        process.wait()
    name += (", holding 4 GiB pinned and 16 GiB on the device" if fat else "") + (f", {count} at once" if count > 1 else "")
    print(json.dumps({"case": name, "said": said, "ended": round(ended, 2), "end": end, "exited": round(time.time(), 2),
                      "exit_took": round(time.time() - ended, 2)}), flush=True)
    time.sleep(8)  # the busy processes' pauses after it, before the next


NO_FAULT = """
import sys, time, torch
w = torch.randn(2, 3, device='cuda'); FAT
torch.cuda.synchronize(); print('ready', flush=True); sys.stdin.readline()
print('no fault', round(time.time(), 2), flush=True); print('-', flush=True)
sys.stdin.readline()
"""

def main() -> None:
    # `gpu_stall_probe.py` (run 2026-12-03, ninth session): lean processes faulting beside 16 busy with small kernels;
    # `gpu_stall_probe.py allocations`: fat ones too, faulting or not, beside 16 that allocate and free as they go
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("busy", nargs="?", choices=("kernels", "allocations"), default="kernels",
                        help="what the 16 busy processes do: small kernels, or allocations too (kernels)")
    parser.add_argument("--out", metavar="DIR", help="also write what it prints to DIR/stalls.txt")
    args = parser.parse_args()
    with _out.tee(args.out, "stalls.txt"):
        probe(args.busy)


def probe(busy_kind: str) -> None:
    phases = [("assert, held 6 s, then exits", ASSERT, 6, "exit"), ("assert, killed at once", ASSERT, 0, "kill"),
              ("assert, exits at once", ASSERT, 0, "exit"), ("misaligned, held 6 s, then exits", MISALIGNED, 6, "exit"),
              ("misaligned, killed at once", MISALIGNED, 0, "kill")]
    if busy_kind == "allocations":
        phases = [("assert, killed at once", ASSERT, 0, "kill"), ("assert, killed at once", ASSERT, 0, "kill", True),
                  ("assert, exits at once", ASSERT, 0, "exit", True), ("no fault, exits", NO_FAULT, 0, "exit", True),
                  ("no fault, killed", NO_FAULT, 0, "kill", True), ("misaligned, killed at once", MISALIGNED, 0, "kill", True),
                  ("assert, killed at once", ASSERT, 0, "kill", False, 4), ("assert, killed at once", ASSERT, 0, "kill", True, 4)]
    seconds = 15 + sum(10 + phase[2] for phase in phases) + 40  # and the fat processes' allocations
    busy = [subprocess.Popen([sys.executable, "-c", BUSY, str(seconds), busy_kind], stdout=subprocess.PIPE, text=True) for _ in range(16)]
    time.sleep(15)  # their imports and contexts
    print(json.dumps({"start": round(time.time(), 2)}), flush=True)
    for phase in phases:
        fault(*phase)
    for index, process in enumerate(busy):
        print(json.dumps({"busy": index, "pauses": json.loads(process.communicate()[0] or "[]")}), flush=True)


if __name__ == "__main__":
    main()
