"""Why the pool stops scaling: the phases of a case timed in K processes running side by side.

    python3 bench/run.py contention --device cuda --processes 1,15 --out DIR        # on the GPU machine: ~1 minute per K
    python3 bench/run.py contention --device cpu --processes 1,2 --ops add,sum,matmul --seconds 10 --out DIR

``runners/sweep_profile.py`` times the phases of a case in one process, and the real pool at several worker counts;
on the H200 the pool did 208 cases/s with one worker and 747 with 15 while the workers' CPU time for the same cases
grew six-fold, and the profile could not say where the extra time went. Here K copies of sweep_profile's in-process
child run at once, each over the same shuffled units of the same ops (the same work, so the per-case figures of K=1
and K=15 are comparable), each for --seconds of measured time after its own start, with one intra-op thread each as
a pool worker has. Per phase group: microseconds per case summed over the processes, and the ratio to K=1. A phase
that grows with K is where the processes contend: the device phases (the call, the contiguous reference, the
dispatch traces) if it is the device or its driver, every phase alike (the CPU and float64 references, the store,
the pickling) if it is the host. The children's CPU seconds per case are given beside the wall.

A child whose device stops working, or that dies, ends there: its units done until then count, nothing is resumed.
Written to DIR/contention.md (printed too), DIR/contention-report.json (everything measured) and DIR/contention.json,
the record: µs per case of each group at each K.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

import _record
import sweep_profile
from _phases import GROUPS, ORACLE_GROUP, OTHER, group_of
from _sample import op_sample


def side_by_side(device: str, ops: tuple[str, ...], count: int, seconds: float, depth: str, tmp: str) -> dict:
    """``count`` children at once over the same units; their phase times, cases and CPU seconds summed."""
    children = []
    for n in range(count):
        base = os.path.join(tmp, f"k{count}-{n}")
        job = {"device": device, "ops": list(ops), "depth": depth, "start": 0, "skip": [], "seconds": seconds,
               "db": base + ".db", "state": base + ".json", "plan": base + ".plan.json"}
        with open(base + ".job.json", "w") as f:
            json.dump(job, f)
        log = open(base + ".log", "w")
        process = subprocess.Popen([sys.executable, sweep_profile.HERE, "--_child", base + ".job.json"], stdout=log, stderr=log)
        children.append((process, job, log))
    started = time.perf_counter()
    codes = []
    for process, job, log in children:
        try:
            codes.append(process.wait(timeout=max(1.0, seconds + sweep_profile.OVERRUN_SECONDS + 120 - (time.perf_counter() - started))))
        except subprocess.TimeoutExpired:
            process.kill()
            codes.append("timeout")
        log.close()
    merged = {"totals": collections.Counter(), "calls": collections.Counter(), "cases": 0, "wall": 0.0, "cpu": 0.0,
              "statuses": collections.Counter(), "ended": collections.Counter(str(c) for c in codes), "reported": 0}
    for _, job, _ in children:
        if not os.path.exists(job["state"]):
            continue
        with open(job["state"]) as f:
            state = json.load(f)
        merged["reported"] += 1
        merged["totals"].update(state["totals"])
        merged["calls"].update(state["calls"])
        merged["statuses"].update(state["statuses"])
        for key in ("cases", "wall", "cpu"):
            merged[key] += state[key]
    return {key: dict(value) if isinstance(value, collections.Counter) else value for key, value in merged.items()} | {
        "processes": count, "span": time.perf_counter() - started}


def _per_case(run: dict, group: str) -> float:
    seconds = sum(v for name, v in run["totals"].items() if group_of(name) == group)
    return 1e6 * seconds / run["cases"] if run["cases"] else 0.0


def render(report: dict) -> str:
    runs = report["runs"]
    base = runs[0]
    lines = [f"# The phases of a case in K processes side by side: {report['meta']['device']}", "",
             f"{report['meta']['date']}, torch {report['meta']['torch']}, {report['meta']['cores']} cores; "
             f"{len(report['ops'])} ops ({report['ops_rule']}), {report['seconds']:g} s measured per process, {report['depth']} depth.", "",
             "```sh", report["meta"]["command"], "```", ""]
    header = "| group | " + " | ".join(f"K={r['processes']} µs/case" for r in runs) + " | " + \
             " | ".join(f"K={r['processes']} / K={base['processes']}" for r in runs[1:]) + " |"
    lines += [header, "| --- |" + " ---: |" * (2 * len(runs) - 1)]

    groups = [*GROUPS, ORACLE_GROUP, OTHER]
    for group in dict.fromkeys(groups):
        values = [_per_case(r, group) for r in runs]
        ratios = [f"{v / values[0]:.2f}x" if values[0] else "-" for v in values[1:]]
        lines.append(f"| {group} | " + " | ".join(f"{v:,.0f}" for v in values) + " | " + " | ".join(ratios) + " |")
    walls = [1e6 * r["wall"] / r["cases"] if r["cases"] else 0.0 for r in runs]
    lines.append("| **total (measured wall)** | " + " | ".join(f"**{v:,.0f}**" for v in walls) + " | " +
                 " | ".join(f"**{v / walls[0]:.2f}x**" if walls[0] else "-" for v in walls[1:]) + " |")
    lines += ["", "| K | processes that reported | cases | cases/s (all processes) | CPU ms per case | ended |",
              "| ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in runs:
        rate = r["cases"] / (r["wall"] / r["reported"]) if r["wall"] else 0.0
        cpu = 1e3 * r["cpu"] / r["cases"] if r["cases"] else 0.0
        lines.append(f"| {r['processes']} | {r['reported']} | {r['cases']:,} | {rate:,.0f} | {cpu:.2f} | "
                     f"{', '.join(f'{k}: {v}' for k, v in sorted(r['ended'].items()))} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    parser.add_argument("--ops", metavar="SPEC", help="ops (names or globs); default every --every-th op of the default selection")
    parser.add_argument("--every", type=int, default=10, help="every Nth op of the default selection (10)")
    parser.add_argument("--processes", default="1,15", help="how many processes side by side, comma-separated (1,15)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per process (30)")
    parser.add_argument("--depth", choices=("catalog", "deep"), default="catalog")
    parser.add_argument("--out", metavar="DIR", required=True)
    args = parser.parse_args()
    import torch

    from torchsleuth import devices

    device = devices.parse(args.device)
    ops = op_sample(args.ops, args.every)
    counts = [int(k) for k in args.processes.split(",")]
    report = {"ops": ops, "ops_rule": f"--ops {args.ops}" if args.ops else f"every {args.every}th op of the default selection",
              "seconds": args.seconds, "depth": args.depth, "runs": [],
              "meta": {"command": _record.command("contention", sys.argv[1:], args.out), "device": device, "torch": torch.__version__,
                       "cores": len(os.sched_getaffinity(0)), "date": time.strftime("%Y-%m-%d %H:%M")}}
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="contention.") as tmp:
        for count in counts:
            print(f"{count} processes side by side, {len(ops)} ops, {args.seconds:g} s each ...", file=sys.stderr, flush=True)
            report["runs"].append(side_by_side(device, ops, count, args.seconds, args.depth, tmp))
    text = render(report)
    with open(os.path.join(args.out, "contention.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "contention-report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(text)
    columns = ["group", *(f"K={r['processes']} µs/case" for r in report["runs"])]
    rows = [[group, *(round(_per_case(r, group)) for r in report["runs"])] for group in dict.fromkeys([*GROUPS, ORACLE_GROUP, OTHER])]
    rows.append(["total (measured wall)", *(round(1e6 * r["wall"] / r["cases"]) if r["cases"] else None for r in report["runs"])])
    _record.write(args.out, "contention", device=device, table=_record.table(columns, rows),
                  figures={f"K={r['processes']} cases": r["cases"] for r in report["runs"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
