"""The whole catalog's sweep as a timeline: when each unit began and ended, and every worker the pool started.

    python bench/catalog_timeline.py --device cuda --out DIR [--workers N] [--seconds S] [--ops SPEC]

Runs ``torchsleuth.sweep.sweep`` with the config ``torchsleuth ops --device D --no-shrink`` makes (every op of the
default selection, or --ops) and writes, as it goes (a run killed by a time limit leaves what it had):

* ``DIR/timeline.jsonl``: one JSON object per line, ``t`` in seconds since the sweep began: ``{"start": N}`` (the
  units planned), ``{"begun": UNIT}`` (handed to a worker), ``{"done": UNIT, "cases": N}``, ``{"worker": UNIT|null,
  "why": "first"|"replace"}`` (a worker process started: the first ones, then each replacement after a device lost,
  a crash, a hang or a replay alone), ``{"start_method": "forkserver"|"spawn"}`` once, and ``{"cases": N}`` every 10 s;
* ``DIR/runs.db``: the store (each case's own seconds in ``outcomes.seconds``);
* ``DIR/summary.json``: wall time (from the sweep's call; ``since_start`` from before the ops are resolved, as
  ``torchsleuth ops`` resolves them after its imports), cases, cases/s, the parent's CPU seconds (the pool's dispatcher
  and the store).

Read it with ``python bench/catalog_timeline.py --read DIR``: the units by wall time, the time outside cases, the
worker starts by unit; ``--compare DIR_A DIR_B``, whether two runs' statuses and findings agree on the units both
finished.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class Log:
    def __init__(self, path: str):
        self.file, self.started = open(path, "a", buffering=1), time.monotonic()

    def write(self, **record) -> None:
        self.file.write(json.dumps({"t": round(time.monotonic() - self.started, 3), **record}) + "\n")


def record(args) -> int:
    from sweep_profile import catalog_config, op_sample

    from torchsleuth.run.pool import Pool
    try:
        from torchsleuth.run.starts import server_holds_catalog
    except ImportError:  # a tree before run.starts: its pool module holds the answer, or none
        from torchsleuth.run import pool as pool_module

        def server_holds_catalog():
            return getattr(pool_module, "_server_catalog", None)
    from torchsleuth.sweep import Frame, Silent, sweep

    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "timeline.jsonl"))
    counts = collections.Counter()
    original_start, original_replace, original_begun = Pool._start, Pool._replace, Frame.unit_begun
    replacing = []

    def start(pool, *args, **kwargs):
        log.write(worker=replacing[-1] if replacing else None, why="replace" if replacing else "first")
        slot = original_start(pool, *args, **kwargs)
        if not counts["started"]:  # how the workers start: forked, or spawned (run.pool.start_context)
            log.write(start_method=pool.context.get_start_method(), server_catalog=server_holds_catalog())
        counts["started"] += 1
        return slot

    def replace(pool, slot):
        replacing.append(getattr(slot.unit, "key", None))
        try:
            return original_replace(pool, slot)
        finally:
            replacing.pop()

    def unit_begun(frame, unit):
        log.write(begun=unit.key)
        return original_begun(frame, unit)

    class Progress(Silent):
        last = time.monotonic()

        def start(self, *, units, done, resumed):
            log.write(start=units, done=done)

        def outcome(self, outcome):
            counts[outcome.case.unit.key] += 1
            counts["all"] += 1
            if time.monotonic() - self.last > 10:
                self.last = time.monotonic()
                log.write(cases=counts["all"])

        def unit_done(self, unit):
            log.write(done=unit.key, cases=counts[unit.key])

    Pool._start, Pool._replace, Frame.unit_begun = start, replace, unit_begun
    try:  # as `torchsleuth ops` does: the fork server loads while this process loads the catalog to resolve the ops
        from torchsleuth.sweep import begin_workers

        begin_workers(args.device, args.workers or len(os.sched_getaffinity(0)))
    except ImportError:  # a tree before that: the sweep starts it, after the ops are resolved
        pass
    ops = op_sample(args.ops, 1)
    config = catalog_config(args.device, ops, workers=args.workers or len(os.sched_getaffinity(0)), depth="catalog")
    began = time.monotonic()
    result = sweep(config, db=os.path.join(args.out, "runs.db"), progress=Progress())
    wall = time.monotonic() - began
    log.write(end=counts["all"])
    own = resource.getrusage(resource.RUSAGE_SELF)
    summary = {"wall": wall, "since_start": time.monotonic() - log.started,
               "cases": result.cases, "cases_per_s": result.cases / wall, "workers": config.workers,
               "statuses": dict(result.statuses), "ops": len(ops), "parent_cpu": own.ru_utime + own.ru_stime}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))
    return 0


def read(path: str) -> int:
    events = [json.loads(line) for line in open(os.path.join(path, "timeline.jsonl"))]
    begun = {e["begun"]: e["t"] for e in events if "begun" in e}
    done = {e["done"]: e["t"] for e in events if "done" in e and "start" not in e}  # the start event counts those done before
    starts = [e for e in events if "worker" in e]
    db = sqlite3.connect(os.path.join(path, "runs.db"))
    own = dict(db.execute("SELECT unit, SUM(seconds) FROM outcomes GROUP BY unit"))
    cases = dict(db.execute("SELECT unit, COUNT(*) FROM outcomes GROUP BY unit"))
    end = max(e["t"] for e in events)
    walls = {u: done.get(u, end) - t for u, t in begun.items()}
    method = next((e["start_method"] + (", the catalog in the server" if e.get("server_catalog") else "")
                   for e in events if "start_method" in e), "not logged")
    print(f"{len(done)} units done of {len(begun)} begun; {sum(cases.values()):,} cases; last event at {end:.1f} s; "
          f"{len(starts)} worker starts ({sum(1 for s in starts if s['why'] == 'replace')} replacements, {method})")
    print(f"unit wall seconds in all {sum(walls.values()):,.0f}; case seconds in all {sum(own.values()):,.0f}")
    if os.path.exists(os.path.join(path, "summary.json")):
        summary = json.load(open(os.path.join(path, "summary.json")))
        if "parent_cpu" in summary:
            since = f" ({summary['since_start']:.1f} s with resolving the ops)" if "since_start" in summary else ""
            print(f"the parent's CPU: {summary['parent_cpu']:.1f} s of {summary['wall']:.1f} s wall{since}")
        errors = summary.get("statuses", {}).get("error", 0)
        print(f"statuses: {summary.get('statuses')}" + (f" ({errors} failed inside torchsleuth: see outcomes.reason)" if errors else ""))
    first, last = min(begun.values(), default=0.0), max(done.values(), default=end)
    print(f"first unit handed out at {first:.1f} s, last done at {last:.1f} s: "
          f"{sum(cases.values()) / max(last - first, 1e-9):,.0f} cases/s between")
    print("\nlongest units (wall s, case s, cases, replacements):")
    replaced = collections.Counter(s["worker"] for s in starts if s["why"] == "replace")
    for unit, wall in sorted(walls.items(), key=lambda kv: -kv[1])[:40]:
        print(f"  {unit:60s} {wall:7.1f} {own.get(unit, 0):7.1f} {cases.get(unit, 0):6d} {replaced[unit]:4d}")
    print("\ncases done over time:", [(e["t"], e["cases"]) for e in events if set(e) == {"t", "cases"}][::3])
    print("\nslowest cases (s, status):")
    for case_id, seconds, status in db.execute("SELECT case_id, seconds, status FROM outcomes ORDER BY seconds DESC LIMIT 12"):
        print(f"  {seconds:7.2f} {status:8s} {case_id[:150]}")
    notes = collections.Counter(kind for (kind,) in db.execute("SELECT kind FROM notes"))
    failed = collections.Counter(kind for (kind,) in db.execute("SELECT kind FROM findings WHERE kind IN ('crash', 'hang')"))
    print(f"\ncollateral (a case set aside or killed with its worker that passed alone): {notes['collateral']}; "
          f"crash findings {failed['crash']}, hang findings {failed['hang']}")
    return 0


def compare(first: str, second: str) -> int:
    """The cases two runs both stored, unit by unit where both finished the unit: the same statuses, the same findings?"""
    def done(path):
        db = sqlite3.connect(os.path.join(path, "runs.db"))
        finished = {u for (u,) in db.execute("SELECT unit FROM units WHERE state = 'done'")}
        statuses = {c: (u, s) for c, u, s in db.execute("SELECT case_id, unit, status FROM outcomes")}
        kinds = collections.defaultdict(set)
        for case_id, kind in db.execute("SELECT case_id, kind FROM findings"):
            kinds[case_id].add(kind)
        return finished, statuses, kinds

    (fa, sa, ka), (fb, sb, kb) = done(first), done(second)
    units = fa & fb
    cases = [c for c, (u, _) in sa.items() if u in units]
    differ = [c for c in cases if sb.get(c, (None, None))[1] != sa[c][1] or ka.get(c, set()) != kb.get(c, set())]
    missing = [c for c in cases if c not in sb] + [c for c, (u, _) in sb.items() if u in units and c not in sa]
    print(f"{len(units)} units finished in both, {len(cases):,} cases: {len(differ)} differ in status or findings, "
          f"{len(missing)} stored by one run only")
    for c in differ[:30]:
        print(f"  {c}: {sa[c][1]} {sorted(ka.get(c, ()))} -> {sb.get(c, (None, None))[1]} {sorted(kb.get(c, ()))}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ops", metavar="SPEC", help="ops (names or globs); default every op of the default selection")
    parser.add_argument("--workers", type=int, help="worker processes (default: one per CPU, as torchsleuth ops)")
    parser.add_argument("--out", metavar="DIR")
    parser.add_argument("--read", metavar="DIR", help="summarize a timeline written before")
    parser.add_argument("--compare", nargs=2, metavar=("DIR_A", "DIR_B"), help="the cases two timelines both finished: same statuses and findings?")
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.read:
        return read(args.read)
    if not args.out:
        parser.error("--out DIR is required")
    return record(args)


if __name__ == "__main__":
    sys.exit(main())
