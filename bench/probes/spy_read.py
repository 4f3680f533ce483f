"""py-spy's samples of a sweep's processes, read by phase: the outermost torchsleuth function below the engine.

    python3 bench/probes/spy_read.py record --after 20 --seconds 20 --out DIR -- python3 bench/run.py catalog ...
    python3 bench/probes/spy_read.py read DIR/p_*.txt [--out DIR]

``record`` starts the command, waits ``--after`` seconds, then has py-spy (``py-spy record -f raw --idle -r 100``)
sample the command's process and every process below it for ``--seconds``: DIR/p_PID.txt each, and DIR/processes.txt
(``ps`` of them then). On 2026-12-03 (bench/cuda-sweep.md, "Where a worker's time goes") the command was the catalog
runner over every 10th op on an H200, py-spy 0.4.3 carried as a wheel (bench/run.py --wheels).

``read``: each line of a raw file is one stack (frames outermost first, ``;``-separated) and how many samples it had.
A sample's phase is the first torchsleuth frame below the last ``engine.py`` frame (outside the engine: the
innermost torchsleuth frame, as for a worker loading the catalog or waiting for work); the three largest leaves of
each phase say what it was doing. Threads with no Python frame are left out.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import time

import _out


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    return f"{name} {where.rstrip(')').rsplit('/', 1)[-1]}"


def phase(frames: list[str]) -> str:
    engine = [i for i, f in enumerate(frames) if "torchsleuth/engine.py" in f]
    if not engine:
        ours = [f for f in frames if "torchsleuth/" in f]
        return "outside engine: " + (_short(ours[-1]).split(":")[0] if ours else _short(frames[-1]))
    below = frames[engine[-1] + 1:]
    ours = [f for f in below if "torchsleuth/" in f]
    if not ours:
        return f"engine {_short(frames[engine[-1]])} -> " + (_short(below[0]) if below else "itself")
    return _short(ours[0]).split(":")[0]


def read(paths: list[str]) -> int:
    phases, leaves, total = collections.Counter(), collections.defaultdict(collections.Counter), 0
    for path in paths:
        for line in open(path):
            stack, count = line.rstrip("\n").rsplit(" ", 1)
            frames = [f for f in stack.split(";") if f]
            if not frames:
                continue
            key = phase(frames)
            phases[key] += int(count)
            leaves[key][_short(frames[-1])] += int(count)
            total += int(count)
    print(f"{total} samples")
    for key, n in phases.most_common(30):
        top = ", ".join(f"{leaf} {m / n:.0%}" for leaf, m in leaves[key].most_common(3))
        print(f"{n / total:6.1%}  {key}  | {top}")
    return 0


def descendants(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [c for child in map(int, found) for c in (child, *descendants(child))]


def record(command: list[str], after: float, seconds: float, out: str) -> int:
    os.makedirs(out, exist_ok=True)
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("no py-spy on PATH (bench/run.py --wheels DIR installs a carried wheel)")
    running = subprocess.Popen(command)
    time.sleep(after)
    pids = [running.pid, *descendants(running.pid)]
    with open(os.path.join(out, "processes.txt"), "w") as f:
        subprocess.run(["ps", "-o", "pid,ppid,pcpu,etime,args", "-p", ",".join(map(str, pids))], stdout=f)
    spies = [subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(int(seconds)), "--idle", "-r", "100", "-f", "raw",
                               "-o", os.path.join(out, f"p_{pid}.txt")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for pid in pids]
    for process in spies:
        process.wait()
    return running.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("mode", choices=("record", "read"))
    parser.add_argument("--after", type=float, default=20.0, help="record: seconds before sampling begins (20)")
    parser.add_argument("--seconds", type=float, default=20.0, help="record: seconds sampled (20)")
    parser.add_argument("--out", metavar="DIR", help="record: where the samples go; read: also write the table to DIR/spy.txt")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="record: -- COMMAND ...; read: the raw files")
    args = parser.parse_args()
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if args.mode == "read" and "--out" in rest[:-1]:  # given after the files
        at = rest.index("--out")
        args.out, rest = rest[at + 1], rest[:at] + rest[at + 2:]
    if args.mode == "record":
        if not args.out:
            parser.error("record needs --out DIR")
        return record(rest, args.after, args.seconds, args.out)
    with _out.tee(args.out, "spy.txt"):
        return read(rest)


if __name__ == "__main__":
    sys.exit(main())
