"""Where the test suite's CPU goes: each test file run alone, its wall time and the CPU seconds it cost (CONTRIBUTING.md).

    python3 bench/probes/suite_cpu.py [--out DIR] [FILE ...]     # from the repository root, with .venv made

Each file runs in its own ``pytest -p no:xdist`` (a file's module fixtures once, as CI's ``--dist loadfile`` runs
them), one after the other. Its CPU is the whole machine's busy time over the run, read from /proc/stat, so the
processes a test starts and does not wait for (gloo ranks, Ray's workers) count too: run it on an otherwise idle
machine. Each file pays pytest's start and torch's import (about 6 s here) that CI's two processes pay once. Prints a
line a file (file, wall s, CPU s, pytest's exit status) and the sums, slowest first.
"""

import argparse
import os
import pathlib
import subprocess
import sys
import time

import _out

ROOT = pathlib.Path(_out.ROOT)


def busy() -> float:
    """Seconds the machine's CPUs have been busy since boot, all of them together."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", help="test files (default: every tests/**/test_*.py)")
    parser.add_argument("--out", help="also keep the output in OUT/suite_cpu.txt")
    args = parser.parse_args()
    files = args.files or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))
    env = {**os.environ, "TORCHSLEUTH_NO_BROWSER": "1"}
    rows = []
    with _out.tee(args.out, "suite_cpu.txt"):
        for name in files:
            began, cpu = time.time(), busy()
            done = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", name],
                                  cwd=ROOT, capture_output=True, env=env)
            rows.append((name, time.time() - began, busy() - cpu, done.returncode))
            print("%s\t%.1f\t%.1f\t%d" % rows[-1], flush=True)
        print(f"{len(rows)} files: {sum(r[1] for r in rows):.1f} s wall, {sum(r[2] for r in rows):.1f} s CPU; the most CPU:")
        for name, wall, cpu, _ in sorted(rows, key=lambda r: -r[2])[:12]:
            print(f"  {cpu:7.1f} s CPU {wall:7.1f} s wall  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
