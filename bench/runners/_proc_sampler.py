"""What every process on the machine is doing while a sweep's workers fall silent together.

Whole-catalog runs on an H200 (bench/cuda-sweep.md, runs V-Y) go silent for 5-20 s at a time: no worker begins or
ends a case, the parent waits on their pipes, and ``nvidia-smi`` beside the run answers nothing for as long (run Y).
This samples, from a thread of the harness (``runners/catalog.py``), every thread of every process on the machine
not asleep in a poll or a futex (and of the kernel's own threads, the GPU driver's and those running or waiting): its
state (``R`` running, ``D`` waiting in the kernel, ``Z`` a zombie), the kernel function it waits in
(``/proc/PID/task/TID/wchan``) and, for a thread in ``D``, its kernel stack (``/proc/.../stack``, where readable). One
sample every ``BASELINE`` seconds, and once a second while the parent has logged nothing for ``STALL`` seconds, at most
``PER_STALL`` a stall; each a JSON line in ``procs.jsonl``:

    {"t": SECONDS_SINCE_START, "silent": SECONDS, "threads": [[pid, tid, comm, state, wchan, stack|null], ...]}

``summary(DIR)`` (``bench/run.py catalog --read DIR`` prints it): the threads most often found waiting in the silences,
and the GPU driver's Xid log lines by code from a ``dmesg.txt`` in DIR or beside it (``dmesg -T > DIR/dmesg.txt`` after the run keeps one).
"""

from __future__ import annotations

import collections
import json
import os
import re
import threading
import time

STALL, BASELINE, PER_STALL, MOST = 1.5, 20.0, 8, 200
QUIET = {"S": {"do_select", "do_sys_poll", "ep_poll", "futex_wait_queue", "futex_wait_queue_me", "pipe_read",
               "hrtimer_nanosleep", "do_nanosleep", "wait_woken", "do_wait", "unix_stream_read_generic", "0",
               "futex_do_wait", "anon_pipe_read", "poll_schedule_timeout.constprop.0", "do_epoll_wait"}}


def DRIVER(comm: str) -> bool:
    return any(word in comm.lower() for word in ("nv", "uvm"))


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def threads() -> list:
    """Every thread on the machine that is not asleep in one of the waits a quiet process sits in."""
    seen = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for tid in filter(str.isdigit, os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else ()):
            base = f"/proc/{pid}/task/{tid}"
            stat = _read(f"{base}/stat")
            if stat is None:
                continue
            comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
            state, wchan = rest.split()[0], (_read(f"{base}/wchan") or "?").strip()
            kernel = not _read(f"/proc/{pid}/cmdline")  # a kernel thread: only the driver's, or one running or waiting
            if state == "I" or wchan in QUIET.get(state, ()) or (kernel and state == "S" and not DRIVER(comm)):
                continue
            stack = _read(f"{base}/stack") if state == "D" else None
            seen.append([int(pid), int(tid), comm, state, wchan, stack.strip() if stack else None])
    return seen


class Sampler(threading.Thread):
    """Samples ``threads()`` into ``path``; ``quiet()`` says how long the parent has logged nothing, ``started`` is the
    timeline's zero (``time.monotonic()`` at the process's start)."""

    def __init__(self, path: str, quiet, started: float):
        super().__init__(daemon=True)
        self.file, self.quiet, self.started = open(path, "a", buffering=1), quiet, started

    def run(self) -> None:
        samples, last_baseline, in_stall = 0, 0.0, 0
        while samples < MOST:
            time.sleep(1.0)
            silent, now = self.quiet(), time.monotonic()
            in_stall = in_stall + 1 if silent >= STALL else 0
            if (0 < in_stall <= PER_STALL) or now - last_baseline >= BASELINE:
                last_baseline = now if not in_stall else last_baseline
                self.file.write(json.dumps({"t": round(now - self.started, 3), "silent": round(silent, 2), "threads": threads()}) + "\n")
                samples += 1


def summary(path: str) -> list[str]:
    """Lines saying what the threads did in the silences (``procs.jsonl`` in ``path``) and what the driver logged."""
    lines = []
    procs = os.path.join(path, "procs.jsonl")
    if os.path.exists(procs):
        samples = [json.loads(line) for line in open(procs)]
        silent = [s for s in samples if s["silent"] >= STALL]
        waits = collections.Counter((comm.split("/")[0][:15], state, wchan) for s in silent for _, _, comm, state, wchan, _ in s["threads"]
                                    if state in "DR")
        lines.append(f"threads sampled {len(samples)} times, {len(silent)} of them in silences; most often then, running (R) or "
                     "waiting in the kernel (D): " + "; ".join(f"{comm} {state} {wchan} x{n}" for (comm, state, wchan), n in waits.most_common(4)))
    for log in (os.path.join(path, "dmesg.txt"), os.path.join(os.path.dirname(os.path.abspath(path)), "dmesg.txt")):
        if os.path.exists(log):
            codes = collections.Counter(m.group(1) for m in re.finditer(r"NVRM: Xid \([^)]*\): (\d+)", open(log, errors="replace").read()))
            lines.append("the driver's Xid log lines by code (dmesg.txt; 109 a context-switch timeout, 43 a stopped context, 13 an SM "
                         "exception, a line per SM, 31 an MMU fault): " + ", ".join(f"{code} x{n}" for code, n in sorted(codes.items())))
            break
    return lines
