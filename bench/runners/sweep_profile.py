"""Where a sweep's time goes, per case, on a device: the phases of a case in one process, and the real pool.

    python3 bench/run.py sweep-profile --device cuda --out DIR            # on the GPU machine: 5 to 7 minutes
    python3 bench/run.py sweep-profile --device cpu --ops add,sum,matmul,softmax,addcmul --workers 1,2 --out DIR

Three parts, written to DIR/profile.md (printed too, by ``_profile_report.py``), DIR/profile.json (everything
measured) and the record DIR/sweep-profile.json (the in-process groups' µs per case, the pool's rows):

1. In one process (a child of this one, replaced when a case leaves the device unusable, resuming after that case,
   or kills the process, leaving that unit out; at most RESTARTS_SECONDS go to such restarts), the units of a
   deterministic sample of ops (every 10th op of the default selection, or --ops), planned as the catalog sweep plans
   them (``select.units``, ``sweep.depth``: 3 samples, every search and a sample of the sampled oracles within the
   budget), in a seeded shuffled order until --seconds are spent, each run by ``engine.run_unit`` and stored through
   ``frame.Frame`` into SQLite as the sweep's parent does; every event is pickled and unpickled, as the pipe does.
   The functions that are the phases are wrapped (monkeypatched) with timers on one stack (``_phases.py``): a
   phase's time is the time inside its function minus the time inside any other wrapped function it calls (the
   float64 reference first asked for inside the judge counts once, under the reference), and whatever runs in no
   wrapped function is "other", so the rows add up to the measured wall time.
2. A fresh interpreter timed through what a worker does before its first case: import torch, import the sweep
   (what unpickling the pool's work function does), load the OpInfo catalog, make the device's context.
3. The real sweep (``torchsleuth.sweep.sweep``, no shrink) over a smaller sample of ops (every 40th op, a subset of
   part 1's, so that one worker on a GPU gets through most of it in --pool-seconds; or --ops) at each worker count of
   --workers, each stopped after --pool-seconds: wall time, cases/s, time to the first outcome, worker processes
   started (replacements after device losses and crashes included), the tail (from the first worker left without a
   unit to the last unit's end), worker utilization, the parent's SQLite and CPU time, and the longest units.

Only the standard library, torch and torchsleuth's own dependencies are used.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pickle
import platform
import resource
import subprocess
import sys
import tempfile
import time

import _record
from _phases import GROUPS, OTHER, Phases, group_of, install, overhead_per_call
from _profile_report import render
from _sample import case_kind, catalog_config, op_sample, shuffled_units

HERE = os.path.abspath(__file__)


# --- part 1: one process, phase by phase (the child) --------------------------------------------


def child(job_path: str) -> int:
    """Run units ``job['start']``.. of the shuffled plan until ``job['seconds']`` are spent; state to ``job['state']``."""
    with open(job_path) as f:
        job = json.load(f)
    import torch

    from torchsleuth import _version
    from torchsleuth.engine import device_works, run_unit
    from torchsleuth.judge.plugin import BUILTIN
    from torchsleuth.workers.pool import DeviceLost
    from torchsleuth.store.sqlite import Store
    from torchsleuth.frame import Frame, Silent

    config = catalog_config(job["device"], tuple(job["ops"]), workers=0, depth=job["depth"])
    torch.set_num_threads(max(1, config.threads))  # as workers.pool's worker does
    units = shuffled_units(config)
    for name in (*config.oracles, *config.sampled):
        BUILTIN.get(name)  # imported now, not inside the window
    device_works(config.device)  # the device's context made before the window, as a worker has it before its first case
    store = Store(job["db"])
    run, _ = store.start(config, torch_version=torch.__version__, version=_version.__version__)
    frame = Frame(store=store, run=run, resumed=False, progress=Silent())
    phases = Phases()
    install(phases)
    kinds: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])  # kind -> [cases, seconds inside the case]
    statuses: collections.Counter = collections.Counter()
    done_units: list = []
    state = {"units": len(units), "next": job["start"], "skip": [], "lost": None, "cpu": 0.0}
    if not os.path.exists(job["plan"]):
        with open(job["plan"], "w") as f:
            json.dump([unit.key for unit in units], f)

    def save(finished: bool) -> None:
        state.update(finished=finished, wall=phases.window, totals=dict(phases.totals), calls=dict(phases.calls),
                     sync_by_caller=dict(phases.sync_by_caller), sync_calls=dict(phases.sync_calls), kinds=dict(kinds), statuses=dict(statuses),
                     unit_times=done_units, cases=sum(statuses.values()), missing=phases.missing)
        with open(job["state"] + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(job["state"] + ".tmp", job["state"])

    def piped(events):
        for event in events:
            phases.enter("pipe (pickle)")
            event = pickle.loads(pickle.dumps(event, protocol=pickle.HIGHEST_PROTOCOL))
            phases.leave()
            yield event

    save(False)  # ready: a process that dies from here on died in unit ``state['next']``
    for index in range(job["start"], len(units)):
        if phases.window >= job["seconds"]:
            break
        unit, skip = units[index], set(job["skip"]) if index == job["start"] else set()
        phases.open()
        started, cpu, cases, lost = time.perf_counter(), time.process_time(), 0, None
        stored = frame.unit_begun(unit) | skip
        try:
            for kind, payload in piped(run_unit(unit, config, frozenset(stored))):
                if kind == "outcome":
                    frame.record(payload)
                    skip.add(payload.case.id)
                    statuses[payload.status] += 1
                    kinds[case_kind(payload.case)][0] += 1
                    kinds[case_kind(payload.case)][1] += payload.seconds
                    cases += 1
                elif kind == "note":
                    frame.note(payload.partition(" ")[0], f"{unit.key} {payload.partition(' ')[2]}")
            frame.unit_done(unit)
        except DeviceLost as e:
            lost = str(e)
        except Exception as e:
            frame.unit_done(unit, "failed", f"{type(e).__name__}: {e}")
        phases.close()
        state["cpu"] += time.process_time() - cpu
        done_units.append((unit.key, time.perf_counter() - started, cases))
        if lost is not None:  # this process's device context is gone: a fresh one resumes the unit after this case
            state.update(next=index, skip=sorted(skip), lost=lost)
            save(False)
            os._exit(3)
        state.update(next=index + 1, skip=[])
        save(False)
    save(state["next"] >= len(units))
    store.close()
    return 0


# Seconds beyond --seconds the in-process part may spend starting fresh processes after device losses and crashes.
RESTARTS_SECONDS = 90.0
# Seconds a child may run past its budget (a unit started just before it ran out) before it is taken for hung.
OVERRUN_SECONDS = 120.0


def in_process(args, ops: tuple[str, ...], tmp: str) -> dict:
    """Part 1: children run the plan until ``args.seconds`` are spent; their phase times summed.

    A child that dies in a unit (a kernel that corrupts the heap, a segfault) or runs past its time is replaced; the
    unit it died in is left out (its time too: the state is saved at each unit's end). A child whose device stopped
    working resumes the unit in a fresh child after the case that did it, as the pool does.
    """
    merged = {"totals": collections.Counter(), "calls": collections.Counter(), "sync_by_caller": collections.Counter(), "sync_calls": collections.Counter(),
              "kinds": {}, "statuses": collections.Counter(), "unit_times": [], "wall": 0.0, "cpu": 0.0, "cases": 0,
              "processes": 0, "restarts": [], "left_out": [], "missing": [], "units": None, "finished": False, "startup_seconds": []}
    plan_path = os.path.join(tmp, "plan.json")
    start, skip, failed_starts = 0, [], 0
    deadline = time.monotonic() + args.seconds + RESTARTS_SECONDS
    while merged["wall"] < args.seconds:
        if merged["processes"] and time.monotonic() > deadline:
            merged["restarts"].append(f"no more restarts: {RESTARTS_SECONDS:g} s beyond the budget went to starting processes")
            break
        n = merged["processes"]
        job = {"device": args.device, "ops": list(ops), "depth": args.depth, "start": start, "skip": skip,
               "seconds": args.seconds - merged["wall"], "db": os.path.join(tmp, f"inprocess{n}.db"),
               "state": os.path.join(tmp, f"inprocess{n}.json"), "plan": plan_path}
        job_path = os.path.join(tmp, f"job{n}.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        log = os.path.join(tmp, f"inprocess{n}.log")
        launched = time.perf_counter()
        with open(log, "w") as out:
            try:
                code = subprocess.run([sys.executable, HERE, "--_child", job_path], stdout=out, stderr=out,
                                      timeout=job["seconds"] + OVERRUN_SECONDS + 60).returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        merged["processes"] += 1
        took = time.perf_counter() - launched
        with open(log) as f:
            said = " ".join(f.read().split())[-300:]
        if not os.path.exists(job["state"]):  # died before its first unit began
            failed_starts += 1
            if failed_starts >= 2:
                raise SystemExit(f"the in-process part fails to start (exit {code}): {said}")
            continue
        with open(job["state"]) as f:
            state = json.load(f)
        merged["startup_seconds"].append(took - state["wall"])
        for key in ("totals", "calls", "sync_by_caller", "sync_calls", "statuses"):
            merged[key].update(state[key])
        for kind, (count, seconds) in state["kinds"].items():
            old = merged["kinds"].get(kind, [0, 0.0])
            merged["kinds"][kind] = [old[0] + count, old[1] + seconds]
        merged["unit_times"] += state["unit_times"]
        for key in ("wall", "cpu", "cases"):
            merged[key] += state[key]
        merged["units"], merged["missing"] = state["units"], state["missing"]
        if code == 0:
            merged["finished"] = state["finished"]
            break
        with open(plan_path) as f:
            culprit = json.load(f)[state["next"]]
        if state["lost"]:
            merged["restarts"].append(f"{culprit}: the device stopped working ({state['lost'][:120]}); resumed in a fresh process")
            start, skip = state["next"], state["skip"]
        else:
            how = "ran past its time" if code == "timeout" else f"killed the process ({_exit_name(code)}{': ' + said[-120:] if said else ''})"
            merged["restarts"].append(f"{culprit}: {how}; left out")
            merged["left_out"].append(culprit)
            start, skip = state["next"] + 1, []
        if start >= state["units"]:
            merged["finished"] = True
            break
    for key in ("totals", "calls", "sync_by_caller", "sync_calls", "statuses"):
        merged[key] = dict(merged[key])
    units = collections.defaultdict(lambda: [0.0, 0])  # a unit resumed in a fresh process: its parts summed
    for key, seconds, count in merged["unit_times"]:
        units[key][0] += seconds
        units[key][1] += count
    merged["unit_times"] = [(key, seconds, count) for key, (seconds, count) in units.items()]
    return merged


def _exit_name(code) -> str:
    import signal

    if isinstance(code, int) and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            pass
    return f"exit {code}"


# --- part 2: a worker's start-up, in a fresh interpreter ------------------------------------------------

STARTUP = r"""
import json, sys, time
device = sys.argv[1]
marks = [("start", time.perf_counter())]
import torch
marks.append(("import torch", time.perf_counter()))
import torchsleuth.sweep  # what unpickling the pool's work function imports
marks.append(("import torchsleuth (the sweep and the stack below it)", time.perf_counter()))
from torchsleuth.cases import opinfo
opinfo.catalog()
marks.append(("load the OpInfo catalog", time.perf_counter()))
name = "cpu"
if device != "cpu":
    torch.ones(1, device=device) + 1
    getattr(torch, torch.device(device).type).synchronize()
    name = getattr(torch, torch.device(device).type).get_device_name(torch.device(device))
marks.append(("the device's context and a first kernel", time.perf_counter()))
print(json.dumps({"marks": [(n, t - marks[0][1]) for n, t in marks], "device_name": name}))
"""


def startup(device: str) -> dict:
    launched = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", STARTUP, device], capture_output=True, text=True, timeout=600)
    total = time.perf_counter() - launched
    if done.returncode != 0:
        return {"error": done.stderr[-2000:], "total": total}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    marks = found["marks"]
    steps = [(name, t - marks[i - 1][1]) for i, (name, t) in enumerate(marks) if i]
    steps.append(("interpreter start and exit", total - marks[-1][1]))
    return {"steps": steps, "total": total, "device_name": found["device_name"]}


# --- part 3: the real sweep at each worker count --------------------------------------------


class _Cut(Exception):
    pass


class _Recorder:
    """Timestamps of outcomes and unit ends (the progress), unit starts (Frame.unit_begun, patched); stops at the deadline."""

    def __init__(self, started: float, seconds: float):
        self.started, self.deadline = started, started + seconds
        self.units, self.cases, self.first = 0, 0, None
        self.begun: dict[str, float] = {}  # unit -> when the parent handed it to a worker
        self.first_case: dict[str, tuple[float, float]] = {}  # unit -> (when its first outcome came, that case's seconds)
        self.done: list[tuple[str, float]] = []
        self.starts: list[float] = []  # when the pool started a worker process
        self.cut_at = None

    def start(self, *, units: int, done: int, resumed: bool) -> None:
        self.units = units - done
        self.planned = time.monotonic()

    def outcome(self, outcome) -> None:
        now = time.monotonic()
        self.cases += 1
        self.first_case.setdefault(outcome.case.unit.key, (now, outcome.seconds))
        if self.first is None:
            self.first = now
        if now > self.deadline:
            self.cut_at = now
            raise _Cut()

    def unit_done(self, unit) -> None:
        self.done.append((unit.key, time.monotonic()))

    def step(self, name: str, done: int, total: int) -> None:
        pass

    def finish(self) -> None:
        pass


@contextlib.contextmanager
def _parent_patches(recorder_of, store_seconds: list):
    """Frame.unit_begun timestamped, the parent's Store calls timed, the pool's worker starts counted; undone after."""
    from torchsleuth.workers.pool import Pool
    from torchsleuth.store.sqlite import Store
    from torchsleuth.frame import Frame

    saved = {("frame", "unit_begun"): Frame.unit_begun}
    if hasattr(Pool, "_start"):  # a worker started: the first W, and each replacement (a device lost, a crash, a hang, a replay)
        saved[("pool", "_start")] = original_start = Pool._start

        def start(pool, *args, **kwargs):
            recorder_of().starts.append(time.monotonic())
            return original_start(pool, *args, **kwargs)

        Pool._start = start
    original_begun = Frame.unit_begun

    def unit_begun(frame, unit):
        recorder_of().begun[unit.key] = time.monotonic()
        return original_begun(frame, unit)

    Frame.unit_begun = unit_begun
    for attribute in ("add", "unit_state", "cases_done", "note", "commit"):
        saved[("store", attribute)] = getattr(Store, attribute)

        def timed(*args, _function=getattr(Store, attribute), **kwargs):
            start = time.perf_counter()
            try:
                return _function(*args, **kwargs)
            finally:
                store_seconds[0] += time.perf_counter() - start

        setattr(Store, attribute, timed)
    try:
        yield
    finally:
        for (owner, attribute), value in saved.items():
            setattr({"frame": Frame, "store": Store, "pool": Pool}[owner], attribute, value)


def pool_run(device: str, ops: tuple[str, ...], workers: int, depth: str, seconds: float, tmp: str) -> dict:
    from torchsleuth.sweep import sweep

    config = catalog_config(device, ops, workers=workers, depth=depth)
    store_seconds = [0.0]
    started = time.monotonic()
    recorder = _Recorder(started, seconds)
    cpu_before, children_before = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    result = None
    with _parent_patches(lambda: recorder, store_seconds):
        try:
            result = sweep(config, db=os.path.join(tmp, f"pool{workers}.db"), progress=recorder)
        except _Cut:
            pass
    ended = time.monotonic()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "workers": workers, "units": recorder.units, "units_done": len(recorder.done), "cases": recorder.cases,
        "wall": (recorder.cut_at or ended) - started, "sweep_call": ended - started, "cut": recorder.cut_at is not None,
        "first_outcome": None if recorder.first is None else recorder.first - started,
        "planned": getattr(recorder, "planned", started) - started,
        "parent_store": store_seconds[0], "worker_starts": len(recorder.starts), "parent_cpu": time.process_time() - cpu_before,
        "workers_cpu": (children.ru_utime + children.ru_stime) - (children_before.ru_utime + children_before.ru_stime),
        "statuses": dict(result.statuses) if result is not None else None,
    }
    starts = _unit_starts(recorder)
    durations = {key: t - starts[key] for key, t in recorder.done if key in starts}
    record["unit_seconds"] = sorted(((k, round(v, 3)) for k, v in durations.items()), key=lambda kv: -kv[1])
    ready = [starts[key] - started for key in recorder.begun if recorder.begun[key] < _first_done(recorder) and key in recorder.first_case]
    record["workers_ready"] = (min(ready), max(ready)) if ready else None
    record.update(_tail(recorder, workers, started, durations, starts))
    return record


def _first_done(recorder: _Recorder) -> float:
    return recorder.done[0][1] if recorder.done else float("inf")


def _unit_starts(recorder: _Recorder) -> dict[str, float]:
    """When each unit's work began: when the parent handed it over, or, for a worker's first unit (handed over before
    any unit ended, while the worker was still starting), when its first case began (its outcome less its seconds)."""
    starts = {}
    for key, begun in recorder.begun.items():
        if begun < _first_done(recorder) and key in recorder.first_case:
            arrived, seconds = recorder.first_case[key]
            starts[key] = max(begun, arrived - seconds)
        else:
            starts[key] = begun
    return starts


def _tail(recorder: _Recorder, workers: int, started: float, durations: dict, starts: dict) -> dict:
    """The tail: from the first worker left without a unit (the (N-W+1)-th unit's end) to the last unit's end."""
    if not recorder.done:
        return {"tail": None}
    ends = [t for _, t in recorder.done]
    end = ends[-1]
    busy_share = sum(durations.values()) / (min(workers, max(1, recorder.units)) * (end - started))
    if recorder.cut_at is not None or len(ends) < recorder.units:
        return {"tail": None, "utilization": busy_share, "work_end": end - started}
    width = min(workers, recorder.units)
    first_idle = ends[recorder.units - width]
    idle = sum((j - (recorder.units - width) + 1) * (ends[j + 1] - ends[j]) for j in range(recorder.units - width, len(ends) - 1))
    stragglers = [(key, round(t - starts[key], 3), round(starts[key] - started, 3)) for key, t in recorder.done if t > first_idle and key in starts]
    return {"tail": end - first_idle, "first_idle": first_idle - started, "work_end": end - started, "idle_worker_seconds": idle,
            "utilization": busy_share, "stragglers": sorted(stragglers, key=lambda s: -s[1])}


# --- main --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    parser.add_argument("--ops", metavar="SPEC", help="ops for both parts (names or globs, as torchsleuth ops --ops); "
                        "default: every --every-th op of the default selection in one process, every --pool-every-th in the pool")
    parser.add_argument("--every", type=int, default=10, help="the in-process sample: every Nth op of the default selection (10)")
    parser.add_argument("--pool-every", type=int, default=40, help="the pool's sample: every Nth op of the default selection (40)")
    parser.add_argument("--seconds", type=float, default=45.0, help="budget of the in-process part's measured wall time (45)")
    parser.add_argument("--workers", help="worker counts of the pool part, comma-separated (default 1,2,4,8,15 off the CPU, 1,2 on it)")
    parser.add_argument("--pool-seconds", type=float, default=50.0, help="each pool run is stopped after this many seconds (50)")
    parser.add_argument("--depth", choices=("catalog", "deep"), default="catalog",
                        help="the sweep's depth (default catalog, as a whole-catalog run; deep as a run pointed at a few ops)")
    parser.add_argument("--out", metavar="DIR", help="where profile.md and profile.json go (required)")
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        return child(args._child)
    if not args.out:
        parser.error("--out DIR is required")

    import torch

    from torchsleuth import _version, devices

    args.device = devices.parse(args.device)
    workers = [int(w) for w in (args.workers or ("1,2" if args.device == "cpu" else "1,2,4,8,15")).split(",")]
    ops = op_sample(args.ops, args.every)
    pool_ops = op_sample(args.ops, args.pool_every)
    os.makedirs(args.out, exist_ok=True)
    config = catalog_config(args.device, ops, workers=0, depth=args.depth)
    report = {
        "args": vars(args) | {"workers": workers},
        "ops": ops, "ops_rule": f"--ops {args.ops}" if args.ops else f"every {args.every}th op of the default selection",
        "pool_ops": pool_ops, "pool_ops_rule": f"--ops {args.ops}" if args.ops else f"every {args.pool_every}th op of the default selection",
        "meta": {
            "command": _record.command("sweep-profile", sys.argv[1:], args.out),
            "device": args.device, "torch": torch.__version__, "python": platform.python_version(), "torchsleuth": _version.__version__,
            "cores": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "date": time.strftime("%Y-%m-%d %H:%M"), "threads": config.threads,
            "config": f"{args.depth} depth: samples {config.samples}, search {','.join(config.search)} within {config.budget} cases per unit, "
                      f"sampled oracles {','.join(config.sampled) or 'none'}, oracles {','.join(config.oracles) or 'none'}, "
                      f"{len(config.dtypes)} dtypes, {len(config.layouts)} layouts, {len(config.variants)} variants, no shrink",
        },
    }
    with tempfile.TemporaryDirectory(prefix="sweep_profile.") as tmp:
        print(f"in one process: {len(ops)} ops, {args.seconds:g} s ...", file=sys.stderr, flush=True)
        report["meta"]["load"] = [("in one process", os.getloadavg()[0])]
        report["in_process"] = in_process(args, ops, tmp)
        calls = sum(report["in_process"]["calls"].values())
        per_call = overhead_per_call()
        report["timer_overhead_us"] = 1e6 * per_call
        report["timer_overhead_share"] = per_call * calls / report["in_process"]["wall"] if report["in_process"]["wall"] else 0.0
        print("a worker's start-up ...", file=sys.stderr, flush=True)
        report["startup"] = startup(args.device)
        report["meta"]["device_name"] = report["startup"].get("device_name", "?")
        report["pool"] = []
        for count in workers:
            print(f"the real sweep with {count} workers: {len(pool_ops)} ops ...", file=sys.stderr, flush=True)
            report["meta"]["load"].append((f"{count} workers", os.getloadavg()[0]))
            report["pool"].append(pool_run(args.device, pool_ops, count, args.depth, args.pool_seconds, tmp))
    text = render(report)
    with open(os.path.join(args.out, "profile.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "profile.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(text)
    part1, groups = report["in_process"], collections.Counter()
    for name, seconds in part1["totals"].items():
        groups[group_of(name)] += seconds
    per_case = {f"{g} µs per case": round(1e6 * groups[g] / part1["cases"]) for g in (*GROUPS, OTHER)} if part1["cases"] else {}
    columns = ["workers", "cases", "wall_s", "cases_per_s", "first_outcome_s", "worker_starts"]
    rows = [[r["workers"], r["cases"], round(r["wall"], 1), round(r["cases"] / r["wall"]) if r["wall"] else None,
             None if r["first_outcome"] is None else round(r["first_outcome"], 1), r["worker_starts"]] for r in report["pool"]]
    _record.write(args.out, "sweep-profile", device=args.device, table=_record.table(columns, rows),
                  figures={"cases": part1["cases"], "wall_s": round(part1["wall"], 1), **per_case,
                           "startup_s": round(report["startup"].get("total", 0.0), 2)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
