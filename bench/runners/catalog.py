"""The whole catalog's sweep as a timeline: when each unit began and ended, and every worker the pool started.

    python3 bench/run.py catalog --device cuda --command --out DIR      # `torchsleuth ops --device cuda --no-shrink`
    python3 bench/run.py catalog --device cuda --every 10 --exclude laguerre,legendre --out DIR   # a tenth of it
    python3 bench/run.py catalog --read DIR                             # what a run did
    python3 bench/run.py catalog --compare DIR_A DIR_B                  # the same statuses and findings?

Runs ``torchsleuth.sweep.sweep`` with the config ``torchsleuth ops --device D --no-shrink`` makes (every op of the
default selection, or --ops, or every --every-th op of it less --exclude's), or with ``--command`` that command itself
(``--no-progress --out DIR``: its checks, its report, its repro scripts), and writes, as it goes (a run killed by a time limit leaves what it had):

* ``DIR/timeline.jsonl``: one JSON object per line, ``t`` in seconds since the process started (before torch is
  imported): ``{"imported": true}``, ``{"resolved": N}`` (the ops resolved), ``{"start": N}`` (the units planned),
  ``{"begun": UNIT}`` (handed to a worker), ``{"done": UNIT, "cases": N}``, ``{"worker": UNIT|null, "why":
  "first"|"replace"}`` (a worker process started: the first ones, then each replacement after a device lost, a crash,
  a hang or a replay alone), ``{"start_method": "forkserver"|"spawn"}`` once (the server answered the pool's first
  question), ``{"kill": UNIT, "replay": bool}`` (a worker killed: a hang, or a replay's), ``{"replay_begun": UNIT}``,
  ``{"describe": UNIT}`` and ``{"described": UNIT}`` (a failed case's description asked and received), ``{"close":
  N}``, ``{"closed": true}``, ``{"result": true}`` and ``{"outputs": [...]}`` (the pool closed, the run read back, the
  outputs written), and
  ``{"cases": N}`` every 10 s;
* ``DIR/stalls.txt``, in runs from 2026-12-03's ninth session to 2026-12-04's tenth: the parent's stacks where it
  wrote nothing for over 2 s (``{"stalled": OFFSET}`` in the timeline). faulthandler's watchdog reads the other threads'
  frames without the GIL, and in run AC (2026-12-04, eleventh session) it killed the parent by SIGSEGV while the main
  thread was importing; the stacks had answered their question (the parent waits on its workers), so it is gone;
* ``DIR/procs.jsonl``: every process's threads that are not idly asleep, with the kernel function each waits in, every
  20 s and once a second while the parent has logged nothing for 1.5 s (``runners/_proc_sampler.py``, since 2026-12-04);
* ``DIR/runs.db``: the store (each case's own seconds in ``outcomes.seconds``);
* ``DIR/summary.json``: wall time (from the sweep's call; ``since_start`` from the process's start, imports
  and resolving the ops included, as the user's clock has it for ``torchsleuth ops``; before 2026-12-03's sixth
  session, from after the imports), cases, cases/s, the parent's CPU seconds (the pool's dispatcher
  and the store); ``DIR/catalog.json``, the same as the run's record.

Read it with ``python3 bench/run.py catalog --read DIR``: the units by wall time, the time outside cases, the
worker starts by unit, the stretches in which nothing was logged, the units that stored more outcomes than they have
cases; ``--compare DIR_A DIR_B``, whether two runs' statuses and findings agree on the units both finished.
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

STARTED = time.monotonic()  # the process's start, before torch is imported: the user's clock starts here too

import _proc_sampler as proc_sampler  # noqa: E402  (after STARTED: the clock starts before any import)
import _record  # noqa: E402


class Log:
    """The timeline, and every process's threads sampled beside it (proc_sampler), more often where the parent has
    written nothing for a while."""

    def __init__(self, path: str):
        self.file, self.started = open(path, "a", buffering=1), STARTED
        self.last = time.monotonic()
        proc_sampler.Sampler(os.path.join(os.path.dirname(path), "procs.jsonl"), lambda: time.monotonic() - self.last, STARTED).start()

    def write(self, **record) -> None:
        now = time.monotonic()
        self.file.write(json.dumps({"t": round(now - self.started, 3), **record}) + "\n")
        self.last = now


def record(args) -> int:
    from _sample import catalog_config, op_sample

    from torchsleuth.cases import select
    from torchsleuth.sweep import sweep
    try:  # the tree of now; --src may give an older one (run.py), where the pool and the run frame lived elsewhere
        from torchsleuth import frame as frame_module
        from torchsleuth.workers import pool as pool_module
    except ImportError:
        frame_module = sys.modules["torchsleuth.sweep"]  # the package's attribute of that name is the function
        from torchsleuth.run import pool as pool_module
    Pool, Frame = pool_module.Pool, frame_module.Frame
    try:
        from torchsleuth.workers.starts import server_holds_catalog
    except ImportError:  # a tree before workers.starts: its pool module holds the answer, or none
        def server_holds_catalog():
            return getattr(pool_module, "_server_catalog", None)

    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "timeline.jsonl"))
    log.write(imported=True)
    counts = collections.Counter()
    replacing, last = [], [time.monotonic()]
    from torchsleuth.report import outputs

    original = {name: getattr(Pool, name) for name in ("_start", "_replace", "_kill", "_send_describe", "_send_run", "_event", "close")}
    sent = {}  # id(slot) -> (when a unit or replay was sent to its worker, that worker's process)
    original["result"], original["write_outputs"] = frame_module.result, outputs.write_outputs
    original.update({name: getattr(Frame, name) for name in ("unit_begun", "start", "record", "unit_done")})
    original["resolve_ops"] = select.resolve_ops

    def key(slot):
        return getattr(slot.unit, "key", None)

    def start(pool, *args, **kwargs):
        slot = original["_start"](pool, *args, **kwargs)
        log.write(worker=replacing[-1] if replacing else None, why="replace" if replacing else "first", pid=slot.process.pid)
        if not counts["started"]:  # how the workers start: forked, or spawned (workers.pool.start_context); the server answered
            log.write(start_method=pool.context.get_start_method(), server_catalog=server_holds_catalog())
        counts["started"] += 1
        return slot

    def replace(pool, slot):
        replacing.append(key(slot))
        try:
            return original["_replace"](pool, slot)
        finally:
            replacing.pop()

    def kill(pool, slot):
        log.write(kill=key(slot), replay=slot.replaying is not None and slot.replaying == slot.in_flight)
        return original["_kill"](pool, slot)

    def send_describe(pool, slot, case_id):
        log.write(describe=key(slot))
        return original["_send_describe"](pool, slot, case_id)

    def send_run(pool, slot, only=None):
        sent[id(slot)] = (time.monotonic(), getattr(slot, "process", None))
        return original["_send_run"](pool, slot, only)

    def event(pool, slot, kind, payload):
        if kind == "begin" and id(slot) in sent:  # how long the worker took from the unit sent to its first case
            at, process = sent.pop(id(slot))
            if process is not None and getattr(slot, "process", None) is process:
                log.write(first_case=key(slot), after=round(time.monotonic() - at, 3), pid=process.pid)
        if kind == "begin" and slot.replaying is not None and slot.replaying == payload:
            log.write(replay_begun=key(slot))
        elif kind == "described":
            log.write(described=key(slot))
        return original["_event"](pool, slot, kind, payload)

    def unit_begun(frame, unit):
        log.write(begun=unit.key)
        return original["unit_begun"](frame, unit)

    def frame_start(frame, *, units, done):
        log.write(start=units, done=done)
        return original["start"](frame, units=units, done=done)

    def frame_record(frame, outcome):
        counts[outcome.case.unit.key] += 1
        counts["all"] += 1
        if time.monotonic() - last[0] > 10:
            last[0] = time.monotonic()
            log.write(cases=counts["all"])
        return original["record"](frame, outcome)

    def unit_done(frame, unit, *args, **kwargs):
        log.write(done=unit.key, cases=counts[unit.key])
        return original["unit_done"](frame, unit, *args, **kwargs)

    def close(pool):
        log.write(close=len(pool.slots) + len(pool.spare))
        original["close"](pool)
        log.write(closed=True)

    def result(*args, **kwargs):
        stored = original["result"](*args, **kwargs)
        log.write(result=True)
        return stored

    def write_outputs(*args, **kwargs):
        written = original["write_outputs"](*args, **kwargs)
        log.write(outputs=sorted(written))
        return written

    def resolve_ops(*args, **kwargs):
        ops = original["resolve_ops"](*args, **kwargs)
        log.write(resolved=len(ops))
        return ops

    Pool._start, Pool._replace, Pool._kill, Pool._send_describe, Pool._event, Pool.close = start, replace, kill, send_describe, event, close
    Pool._send_run = send_run
    frame_module.result, outputs.write_outputs = result, write_outputs
    Frame.unit_begun, Frame.start, Frame.record, Frame.unit_done = unit_begun, frame_start, frame_record, unit_done
    select.resolve_ops = resolve_ops
    workers = args.workers or len(os.sched_getaffinity(0))
    db = os.path.join(args.out, "runs.db")
    sampled = args.every > 1 or args.exclude
    if args.command:  # the command itself, as a user types it: its imports, its checks, its report
        from torchsleuth.cli.main import main as command

        argv = ["ops", "--device", args.device, "--no-shrink", "--no-progress", "--out", args.out]
        spec = ",".join(op_sample(args.ops, args.every, args.exclude)) if sampled else args.ops
        argv += (["--ops", spec] if spec else []) + (["--workers", str(args.workers)] if args.workers else [])
        began = time.monotonic()
        code = command(argv)
        wall = time.monotonic() - began
        statuses = dict(sqlite3.connect(db).execute("SELECT status, COUNT(*) FROM outcomes GROUP BY status"))
        extra = {"command": "torchsleuth " + " ".join(argv if not sampled else [*argv[:-2], "--ops", "..."]), "exit": code}
    else:
        try:  # as `torchsleuth ops` does: the fork server loads while this process loads the catalog to resolve the ops
            from torchsleuth.sweep import begin_workers

            begin_workers(args.device, workers)
        except ImportError:  # a tree before that: the sweep starts it, after the ops are resolved
            pass
        ops = op_sample(args.ops, args.every, args.exclude)
        config = catalog_config(args.device, ops, workers=workers, depth="catalog")
        log.write(resolved=len(ops))
        began = time.monotonic()
        result = sweep(config, db=db)
        wall = time.monotonic() - began
        statuses, extra = dict(result.statuses), {"ops": len(ops)}
    log.write(end=counts["all"])
    own = resource.getrusage(resource.RUSAGE_SELF)
    cases = sum(statuses.values())
    summary = {"wall": wall, "since_start": time.monotonic() - log.started, "cases": cases, "cases_per_s": cases / wall,
               "workers": workers, "statuses": statuses, "parent_cpu": own.ru_utime + own.ru_stime, **extra}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))
    kept = {"wall": "wall_s", "since_start": "since_start_s", "cases": "cases", "cases_per_s": "cases_per_s", "workers": "workers",
            "statuses": "statuses", "parent_cpu": "parent_cpu_s", "exit": "exit", "ops": "ops"}
    _record.write(args.out, "catalog", device=args.device,
                  figures={name: round(summary[key], 1) if isinstance(summary[key], float) else summary[key]
                           for key, name in kept.items() if key in summary})
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
            since = f" ({summary['since_start']:.1f} s since the start)" if "since_start" in summary else ""
            print(f"the parent's CPU: {summary['parent_cpu']:.1f} s of {summary['wall']:.1f} s wall{since}")
        errors = summary.get("statuses", {}).get("error", 0)
        print(f"statuses: {summary.get('statuses')}" + (f" ({errors} failed inside torchsleuth: see outcomes.reason)" if errors else ""))
    phases = {name: next((e["t"] for e in events if key in e), None) for name, key in
              (("imported", "imported"), ("ops resolved", "resolved"), ("units planned", "start"), ("server answered", "start_method"))}
    print("the start:", ", ".join(f"{name} at {t:.1f} s" for name, t in phases.items() if t is not None),
          "(s since the process started; before 2026-12-03's sixth session, since the sweep's call)")
    end_of_queue = max(begun.values(), default=0.0)
    for name, key in (("replays begun", "replay_begun"), ("replays killed", "kill"), ("descriptions asked", "describe"),
                      ("descriptions received", "described")):
        times = [e["t"] for e in events if key in e and e["t"] >= end_of_queue and (key != "kill" or e.get("replay"))]
        if times:
            print(f"after the last unit was handed out ({end_of_queue:.1f} s): {len(times)} {name}, {min(times):.1f}-{max(times):.1f} s")
    ending = {name: next((e["t"] for e in events if key in e), None) for name, key in
              (("pool closing", "close"), ("pool closed", "closed"), ("run read back", "result"), ("outputs written", "outputs"))}
    if any(t is not None for t in ending.values()):
        print("the end:", ", ".join(f"{name} at {t:.1f} s" for name, t in ending.items() if t is not None), f"(the last event at {end:.1f} s)")
    waits = sorted((e["t"], e["after"]) for e in events if "first_case" in e)  # logged since 2026-12-03's eighth session
    if waits:
        slow = [t for t, after in waits if after > 5]
        print(f"from a unit sent to a worker to its first case: median {sorted(a for _, a in waits)[len(waits) // 2]:.2f} s, "
              f"the longest {max(a for _, a in waits):.1f} s; {len(slow)} of {len(waits)} over 5 s"
              + (f" (their first cases begun at {min(slow):.0f}-{max(slow):.0f} s)" if slow else ""))
    silent(events, end_of_queue)
    for line in proc_sampler.summary(path):  # since 2026-12-04: what every process did in the silences; the kernel's log
        print(line)
    stored = {e["done"]: e["cases"] for e in events if "done" in e and "cases" in e}  # outcomes stored as it ran
    twice = {unit: n - cases[unit] for unit, n in stored.items() if n > cases.get(unit, n)}
    if twice:
        print(f"units that stored more outcomes than they have cases (run again): {len(twice)}, {sum(twice.values())} more: "
              + ", ".join(f"{unit} +{n}" for unit, n in sorted(twice.items())))
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


def silent(events: list, end_of_queue: float) -> None:
    """The stretches of 2 s or more in which the parent logged nothing (no unit begun or done, no worker's first case,
    no worker started or killed), before the last unit was handed out and after; and whether the parent stood still
    then or waited on its workers (``stalled``: its stacks in stalls.txt, since 2026-12-03's ninth session)."""
    logged = [e for e in events if "stalled" not in e]
    start = next((e["t"] for e in events if "first_case" in e), 0.0)  # from the first case on: not the workers' start
    gaps = [(a["t"], b["t"] - a["t"]) for a, b in zip(logged, logged[1:]) if b["t"] - a["t"] >= 2.0 and a["t"] > start]
    for name, chosen in (("before", [g for g in gaps if g[0] < end_of_queue]), ("after", [g for g in gaps if g[0] >= end_of_queue])):
        if chosen:
            print(f"silent stretches (2 s or more) {name} the last unit was handed out: {len(chosen)}, {sum(g for _, g in chosen):.1f} s "
                  f"(at {', '.join(f'{t:.0f}' for t, _ in chosen)} s)")
    stalls = sum(1 for e in events if "stalled" in e and e["t"] > start)
    if stalls:
        print(f"the parent's stacks written {stalls} times, each after 1.5-2 s with nothing logged (stalls.txt: where it stood)")


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
    moves = collections.Counter(f"{sa[c][1]} {sorted(ka.get(c, ()))} -> {sb.get(c, (None, None))[1]} {sorted(kb.get(c, ()))}" for c in differ)
    for move, n in moves.most_common():  # since 2026-12-04: how many moved which way, before the first 30 one by one
        print(f"  {n:5d} {move}")
    for c in differ[:30]:
        print(f"  {c}: {sa[c][1]} {sorted(ka.get(c, ()))} -> {sb.get(c, (None, None))[1]} {sorted(kb.get(c, ()))}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ops", metavar="SPEC", help="ops (names or globs); default every op of the default selection")
    parser.add_argument("--every", type=int, default=1, metavar="K", help="every K-th op of the default selection (default 1: all)")
    parser.add_argument("--exclude", default="", metavar="WORDS", help="leave out the ops with one of these comma-separated words "
                        "in their name (laguerre,legendre: polynomials whose searched degrees hang)")
    parser.add_argument("--workers", type=int, help="worker processes (default: one per CPU, as torchsleuth ops)")
    parser.add_argument("--out", metavar="DIR")
    parser.add_argument("--command", action="store_true", help="run `torchsleuth ops --device D --no-shrink` itself (its report "
                        "too: repro scripts under DIR) instead of the sweep function; the same hooks")
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
