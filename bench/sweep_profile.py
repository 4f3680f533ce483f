"""Where a sweep's time goes, per case, on a device: the phases of a case in one process, and the real pool.

    python bench/sweep_profile.py --device cuda --out DIR            # on the GPU machine: 5 to 7 minutes
    python bench/sweep_profile.py --device cpu --ops add,sum,matmul,softmax,addcmul --workers 1,2 --out DIR

Three parts, written to DIR/profile.md (printed too) and DIR/profile.json:

1. In one process (a child of this one, replaced when a case leaves the device unusable, resuming after that case,
   or kills the process, leaving that unit out; at most RESTARTS_SECONDS go to such restarts), the units of a
   deterministic sample of ops (every 10th op of the default selection, or --ops), planned as the catalog sweep plans
   them (``select.units``, ``sweep.depth``: 3 samples, every search and a sample of the sampled oracles within the
   budget), in a seeded shuffled order until --seconds are spent, each run by ``engine.run_unit`` and stored through
   ``sweep.Frame`` into SQLite as the sweep's parent does; every event is pickled and unpickled, as the pipe does.
   The functions that are the phases are wrapped (monkeypatched) with timers on one stack: a phase's time is the
   time inside its function minus the time inside any other wrapped function it calls (the float64 reference
   first asked for inside the judge counts once, under the reference), and whatever runs in no wrapped function is
   "other", so the rows add up to the measured wall time.
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
import functools
import json
import os
import pickle
import platform
import random
import resource
import shlex
import subprocess
import sys
import tempfile
import time

SEED = 0
HERE = os.path.abspath(__file__)

# Rows of the in-process table: (phase, group, what it is). A phase is time inside the function(s) named, minus
# time inside any other phase's function they call. Groups are the question's categories.
ROWS = (
    ("device call", "device call", "call.execute: the case's own call (on CUDA: the kernel launches; the kernels' time shows under synchronize)"),
    ("prepare", "device call", "call.prepare: the sample's tensors moved to the device, laid out on poisoned storage"),
    ("snapshots", "device call", "call.snapshot: every storage copied before and after the call"),
    ("synchronize", "synchronize", "call.synchronize: waiting for the device after each call (a no-op on the CPU)"),
    ("device check", "synchronize", "engine.device_works after a raised case: a kernel and a synchronize"),
    ("contiguous reference", "contiguous reference", "References.contiguous and __init__: the call on contiguous tensors on the device"),
    ("CPU reference", "CPU reference", "References.cpu: the same call on the CPU, in the case's dtype"),
    ("float64 reference", "float64 reference", "References.float64: the call on the CPU in float64"),
    ("float64 more runs", "float64 reference", "References.perturbed, .jumped (four float64 runs, inputs nudged), .ranged (overflowing as the dtype)"),
    ("dispatch traces", "judging", "call.traced: the call rerun under a dispatch mode, for facts and written paths"),
    ("evidence reruns", "judging", "Evidence.nondeterministic, .declared_nondeterministic, .same_layout: more runs on demand"),
    ("facts", "judging", "run.facts of the references (op names from the trace)"),
    ("judge", "judging", "judge.verdict.judge: contracts, comparisons, tolerances (with every implicit .cpu() sync)"),
    ("coverage", "judging", "cases.reach.reached: the aten overloads a case reached"),
    ("samples", "samples and planning", "run.samples: OpInfo's sample inputs (made once per unit, cached)"),
    ("planning", "samples and planning", "cases_for, the oracles' plans, search.plan/laid_out/within, engine._chosen"),
    ("search edits", "samples and planning", "search.edits.apply: a searched case's edited sample"),
    ("pipe (pickle)", "pipe", "each event pickled and unpickled, as the worker's send and the parent's receive do"),
    ("store (SQLite)", "store", "sweep.Frame into store.sqlite.Store: outcomes, unit states, commits (the parent's work)"),
)
ORACLE_GROUP = "judging"
OTHER = "other"
GROUPS = ("device call", "synchronize", "contiguous reference", "CPU reference", "float64 reference", "judging",
          "samples and planning", "pipe", "store")


# --- timing phases on one stack -------------------------------------------------------------


class Phases:
    """Exclusive time per phase: entering a phase pauses the one it was entered from; the bottom phase is ``other``."""

    def __init__(self):
        self.totals: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self.sync_by_caller: dict[str, float] = collections.defaultdict(float)  # caller -> seconds, device syncs only
        self.sync_calls: dict[str, int] = collections.defaultdict(int)  # caller -> device syncs (a CPU one is a no-op)
        self.sync_device = False
        self.missing: list[str] = []  # functions to time that this tree does not have
        self.stack: list[str] = []
        self.mark = 0.0
        self.active = False
        self.window = 0.0  # seconds measured by the clock alone, around the whole window
        self._opened = 0.0

    def open(self) -> None:
        """Start (or resume) the measured window, at the top level (no phase open)."""
        self.active, self.stack, self._opened = True, [OTHER], time.perf_counter()
        self.mark = self._opened

    def close(self) -> None:
        now = time.perf_counter()
        self.totals[self.stack.pop()] += now - self.mark
        self.window += now - self._opened
        self.active = False

    def elapsed(self) -> float:
        return self.window + (time.perf_counter() - self._opened if self.active else 0.0)

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        self.totals[self.stack[-1]] += now - self.mark
        if name == "synchronize":
            self._sync_from = self.stack[-1]
        self.stack.append(name)
        self.calls[name] += 1
        self.mark = now

    def leave(self) -> None:
        now = time.perf_counter()
        name = self.stack.pop()
        self.totals[name] += now - self.mark
        if name == "synchronize" and self.sync_device:
            self.sync_by_caller[self._sync_from] += now - self.mark
            self.sync_calls[self._sync_from] += 1
        self.mark = now

    def timed(self, name, function):
        """``function`` timed as phase ``name`` (a callable of the arguments for a name chosen per call)."""

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if not self.active:
                return function(*args, **kwargs)
            self.enter(name(*args, **kwargs) if callable(name) else name)
            try:
                return function(*args, **kwargs)
            finally:
                self.leave()

        wrapper.__wrapped_phase__ = function
        return wrapper


def _patch(phases: Phases, owner, attribute: str, name) -> None:
    """Time ``owner.attribute`` as ``name``; an attribute this tree lacks is noted (its time stays in its caller's row)."""
    if not hasattr(owner, attribute):
        phases.missing.append(f"{owner.__name__}.{attribute}")
        return
    setattr(owner, attribute, phases.timed(name, getattr(owner, attribute)))


def _patch_cached(phases: Phases, cls, attribute: str, name: str) -> None:
    prop = cls.__dict__.get(attribute)
    if not isinstance(prop, functools.cached_property):
        phases.missing.append(f"{cls.__name__}.{attribute}")
        return
    fresh = functools.cached_property(phases.timed(name, prop.func))
    fresh.__set_name__(cls, attribute)
    setattr(cls, attribute, fresh)


def install(phases: Phases) -> None:
    """Wrap the functions that are the phases (ROWS). Plain functions only: a generator's phase would span its yields."""
    import torch

    from torchsleuth import engine
    from torchsleuth.cases import reach
    from torchsleuth.judge.plugin import Registry, family
    from torchsleuth import search
    from torchsleuth.run import call, evidence, references, samples
    from torchsleuth.search import edits
    from torchsleuth.store.sqlite import Store

    _patch(phases, call, "execute", "device call")
    _patch(phases, call, "prepare", "prepare")
    _patch(phases, call, "snapshot", "snapshots")

    def synchronize(device: str) -> str:
        phases.sync_device = torch.device(device).type != "cpu"
        return "synchronize"

    _patch(phases, call, "synchronize", synchronize)
    _patch(phases, call, "traced", "dispatch traces")
    _patch(phases, engine, "device_works", "device check")
    _patch(phases, references.References, "__init__", "contiguous reference")
    _patch_cached(phases, references.References, "contiguous", "contiguous reference")
    _patch_cached(phases, references.References, "cpu", "CPU reference")
    _patch_cached(phases, references.References, "float64", "float64 reference")
    for attribute in ("perturbed", "jumped", "ranged"):
        _patch_cached(phases, references.References, attribute, "float64 more runs")
    for attribute in ("nondeterministic", "declared_nondeterministic", "same_layout"):
        _patch_cached(phases, evidence.Evidence, attribute, "evidence reruns")
    _patch(phases, engine, "facts_of", "facts")
    _patch(phases, engine, "read_facts", "facts")
    _patch(phases, engine, "judge", "judge")
    _patch(phases, reach, "reached", "coverage")
    _patch(phases, samples, "_samples", "samples")
    _patch(phases, engine, "cases_for", "planning")
    _patch(phases, engine, "_chosen", "planning")
    _patch(phases, Registry, "cases_for", "planning")
    for attribute in ("plan", "laid_out", "within"):
        _patch(phases, search, attribute, "planning")
    _patch(phases, edits, "apply", "search edits")
    _patch(phases, Registry, "run", lambda registry, subject: f"oracle: {family(subject.case.oracle)}")
    for attribute in ("add", "unit_state", "cases_done", "note", "commit"):
        _patch(phases, Store, attribute, "store (SQLite)")


def overhead_per_call() -> float:
    """Seconds one wrapped call adds (two clock reads and the stack), measured on a function that does nothing."""
    phases = Phases()
    nothing = phases.timed("x", lambda: None)
    phases.open()
    start = time.perf_counter()
    for _ in range(20000):
        nothing()
    spent = time.perf_counter() - start
    phases.close()
    start = time.perf_counter()
    for _ in range(20000):
        (lambda: None)()
    return max(0.0, (spent - (time.perf_counter() - start)) / 20000)


# --- what is swept -----------------------------------------------------------------------------


def catalog_config(device: str, ops: tuple[str, ...], *, workers: int, depth: str):
    """The config ``torchsleuth ops --device D --ops ... --no-shrink`` makes at ``depth`` (cli/ops.py's defaults)."""
    from torchsleuth.config import SweepConfig
    from torchsleuth.search import names as search_names
    from torchsleuth.sweep import depth as at_depth

    config = SweepConfig(command="ops", device=device, ops=ops, workers=workers, shrink=False, search=search_names())
    return at_depth(config, deep=depth == "deep")


def op_sample(spec: str | None, every: int) -> tuple[str, ...]:
    from torchsleuth.cases import select

    return select.resolve_ops(spec) if spec else select.resolve_ops(None)[::every]


def shuffled_units(config) -> list:
    from torchsleuth.cases import select

    units = select.units(config.ops, config.dtypes, config.device, probe=config.probe_dtypes)
    random.Random(SEED).shuffle(units)
    return units


def case_kind(case) -> str:
    if case.oracle:
        return f"oracle {case.oracle.split(':', 1)[0]}"
    if case.edits:
        return "searched"
    return f"{case.variant}, {'laid out' if case.layouts else 'contiguous'}"


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


# --- the report ---------------------------------------------------------------------------------


def _unit(key: str) -> str:
    """A unit key (``op|dtype|device``) for a Markdown cell, where ``|`` would split it."""
    op, dtype, _ = key.split("|")
    return f"{op} {dtype}"


def _counts(counter: dict) -> str:
    return ", ".join(f"{count:,} {name}" for name, count in sorted(counter.items(), key=lambda kv: -kv[1]))


def _ops(ops: list) -> str:
    return ", ".join(ops) if len(ops) <= 12 else f"{', '.join(ops[:6])}, ..., {ops[-1]}"


def _us(seconds: float, cases: int) -> str:
    return f"{1e6 * seconds / cases:,.0f}" if cases else "-"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def render(report: dict) -> str:
    meta, part1 = report["meta"], report["in_process"]
    lines = [
        f"# Where a sweep's time goes: {meta['device']} ({meta['device_name']})",
        "",
        "```sh",
        meta["command"],
        "```",
        "",
        f"torch {meta['torch']}, Python {meta['python']}, torchsleuth {meta['torchsleuth']}, {meta['cores']} CPU cores "
        f"(of {meta['cpu_count']}), {meta['machine']}, {meta['date']}. Config: {meta['config']}. Load average (1 min) before "
        f"each part: {', '.join(f'{name} {load:.1f}' for name, load in meta['load'])}.",
        "",
        "## In one process, per case",
        "",
    ]
    cases, wall = part1["cases"], part1["wall"]
    totals = part1["totals"]
    ran = len(part1["unit_times"])
    how_far = "to the end of the plan" if part1["finished"] else f"until the budget of {report['args']['seconds']:g} s was spent"
    lines += [
        f"{len(report['ops'])} ops ({report['ops_rule']}: {_ops(report['ops'])}); {ran} of their {part1['units']} units run in a seeded "
        f"shuffled order, {how_far}: {cases:,} cases in {wall:.1f} s of measured wall time, {cases / wall if wall else 0:.0f} cases/s in one "
        f"process with {meta['threads']} intra-op thread ({_counts(part1['statuses'])}). The process had {part1['cpu']:.1f} s of CPU in "
        f"that time ({_pct(part1['cpu'], wall)} of the wall: below 100% it waited, for the device or for a CPU others held). "
        f"{part1['processes']} process(es)" + (f"; {len(part1['restarts'])} restart(s): " + "; ".join(part1["restarts"][:6])
                                              + (" ..." if len(part1["restarts"]) > 6 else "") if part1["restarts"] else "") + ".",
        "",
        "A phase's time is the time inside its functions minus the time inside any other phase's functions they call; "
        "`other` is the time inside none, so the rows add up to the wall time. Timers add about "
        f"{report['timer_overhead_us']:.2f} µs per wrapped call, {report['timer_overhead_share']:.1%} of the wall time, "
        "spread over the rows." + (f" Not in this tree, so not timed (their time is their caller's): {', '.join(part1['missing'])}."
                                   if part1["missing"] else ""),
        "",
        "| group | µs per case | share |",
        "| --- | ---: | ---: |",
    ]
    groups = collections.Counter()
    for name, seconds in totals.items():
        groups[_group_of(name)] += seconds
    for group in (*GROUPS, OTHER):
        lines.append(f"| {group} | {_us(groups[group], cases)} | {_pct(groups[group], wall)} |")
    lines += [f"| **total (measured wall)** | **{_us(wall, cases)}** | **{_pct(sum(totals.values()), wall)}** |", ""]
    lines += ["| phase | group | µs per case | share | calls per case | what it is |", "| --- | --- | ---: | ---: | ---: | --- |"]
    described = {name: (group, text) for name, group, text in ROWS}
    oracle_rows = sorted(name for name in totals if name.startswith("oracle: "))
    for name in (*described, *oracle_rows, OTHER):
        group, text = described.get(name, (ORACLE_GROUP, "Registry.run: the oracle's own work on its cases") if name != OTHER
                                      else (OTHER, "the engine's loop and glue, outside every phase above"))
        seconds = totals.get(name, 0.0)
        calls = part1["calls"].get(name, 0)
        lines.append(f"| {name} | {group} | {_us(seconds, cases)} | {_pct(seconds, wall)} | "
                     f"{calls / cases if cases and name != OTHER else 0:.2f} | {text} |")
    lines += [f"| **total** | | **{_us(sum(totals.values()), cases)}** | **{_pct(sum(totals.values()), wall)}** | | rows summed; "
              f"the clock around the window: {wall:.2f} s |", ""]
    if part1["sync_by_caller"]:
        device_syncs = sum(part1["sync_calls"].values())
        lines += [f"Device synchronizations (`call.synchronize` off the CPU; implicit ones, `.cpu()`, `float()`, `.item()`, are "
                  f"not counted): {device_syncs / cases if cases else 0:.2f} per case, by the phase that called it:", "",
                  "| caller | µs per case | share | per case |", "| --- | ---: | ---: | ---: |"]
        for caller, seconds in sorted(part1["sync_by_caller"].items(), key=lambda kv: -kv[1]):
            lines.append(f"| {caller} | {_us(seconds, cases)} | {_pct(seconds, wall)} | {part1['sync_calls'].get(caller, 0) / cases:.2f} |")
        lines.append("")
    lines += ["Cases by kind (seconds inside the case's own run, `Outcome.seconds`: its references included when it is the "
              "first case of its sample to ask for them; no planning, store or pipe):", "",
              "| kind | cases | share of cases | µs per case | share of case time |", "| --- | ---: | ---: | ---: | ---: |"]
    inside = sum(s for _, s in part1["kinds"].values())
    for kind, (count, seconds) in sorted(part1["kinds"].items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {kind} | {count:,} | {_pct(count, cases)} | {_us(seconds, count)} | {_pct(seconds, inside)} |")
    lines += ["", "Longest units in one process, and the ops that took most of the time:", "",
              "| unit | seconds | cases |", "| --- | ---: | ---: |"]
    for key, seconds, count in sorted(part1["unit_times"], key=lambda u: -u[1])[:8]:
        lines.append(f"| {_unit(key)} | {seconds:.2f} | {count} |")
    by_op = collections.defaultdict(lambda: [0.0, 0])
    for key, seconds, count in part1["unit_times"]:
        by_op[key.split("|")[0]][0] += seconds
        by_op[key.split("|")[0]][1] += count
    lines += ["", "| op | share of the wall time | cases | ms per case |", "| --- | ---: | ---: | ---: |"]
    for op, (seconds, count) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:8]:
        lines.append(f"| {op} | {_pct(seconds, wall)} | {count:,} | {1e3 * seconds / count if count else 0:.2f} |")
    lines += ["", "## A worker's start-up, in a fresh interpreter", ""]
    start = report["startup"]
    if "error" in start:
        lines += ["failed:", "", "```", start["error"], "```"]
    else:
        lines += ["| step | seconds |", "| --- | ---: |"]
        lines += [f"| {name} | {seconds:.2f} |" for name, seconds in start["steps"]]
        lines += [f"| **total** | **{start['total']:.2f}** |"]
    part1_startup = part1["startup_seconds"]
    if part1_startup:
        lines += ["", f"The in-process child's own start (the above, plus planning the units and importing the oracles): "
                      f"{', '.join(f'{s:.1f}' for s in part1_startup)} s."]
    lines += ["", "## The real sweep, by worker count", "",
              f"`torchsleuth.sweep.sweep`, no shrink, over {len(report['pool_ops'])} ops ({report['pool_ops_rule']}: "
              f"{_ops(report['pool_ops'])}), a fresh database each, each stopped after {report['args']['pool_seconds']:g} s (a stopped "
              "run says `cut`: its rate is over the units it reached, in the sweep's order, and it has no tail). Planned: from the call "
              "to the units planned and the run open in the store (the parent). First outcome: from the call to the first stored case "
              "(spawn, imports, the device's context, the first case). Last worker ready: when the slowest-starting worker began its "
              "first case. Worker starts: processes the pool started, the first ones and every replacement (a device lost, a crash, a "
              "hang, a crash's replay alone). Tail: from the first worker left without a unit to the last unit's end. Utilization: the "
              "units' seconds (a worker's first unit from its first case) over workers x (call to last unit's end). Worker-ms per "
              "case: workers x wall / cases, against the µs per case in one process above.", "",
              "| workers | units | cases | wall s | cases/s | worker-ms per case | planned s | first outcome s | last worker ready s | "
              "worker starts | tail s | tail share | idle worker-s in tail | utilization | parent SQLite s | parent CPU s | workers' CPU s "
              "| longest unit |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    lines += [_pool_row(run) for run in report["pool"]]
    pool_ops = set(report["pool_ops"])
    mine = [(seconds, count) for key, seconds, count in part1["unit_times"] if key.split("|")[0] in pool_ops]
    if mine:
        seconds, count = sum(m[0] for m in mine), sum(m[1] for m in mine)
        lines += ["", f"The same ops in one process (part 1 ran {len(mine)} of their units): {1e3 * seconds / count:.2f} ms per case "
                      f"({count:,} cases); worker-ms per case above it is what the pool adds: start-up, the tail, and workers "
                      "contending for CPUs (and a device)."]
    finished = [run for run in report["pool"] if run.get("tail") is not None]
    if finished:
        run = finished[-1]
        lines += ["", f"Stragglers at {run['workers']} workers: the units still running after the first worker went idle "
                      f"at {run['first_idle']:.1f} s (the run's units ended at {run['work_end']:.1f} s):", "",
                  "| unit | seconds | began at s |", "| --- | ---: | ---: |"]
        lines += [f"| {_unit(key)} | {seconds:.2f} | {began:.1f} |" for key, seconds, began in run["stragglers"][:10]]
    lines.append("")
    return "\n".join(lines)


def _pool_row(run: dict) -> str:
    def number(value, spec=".1f"):
        return "-" if value is None else format(value, spec)

    tail, cases, wall = run.get("tail"), run["cases"], run["wall"]
    longest = f"{_unit(run['unit_seconds'][0][0])} {run['unit_seconds'][0][1]:.1f} s" if run["unit_seconds"] else "-"
    cells = [
        run["workers"], f"{run['units_done']}/{run['units']}", f"{cases:,}", f"{wall:.1f}{' cut' if run['cut'] else ''}",
        number(cases / wall if wall else None, ".0f"), number(1e3 * run["workers"] * wall / cases if cases else None),
        number(run["planned"]), number(run["first_outcome"]), number(run["workers_ready"][1] if run["workers_ready"] else None),
        run.get("worker_starts", "-"),
        number(tail), _pct(tail, run["work_end"]) if tail is not None else "-", number(run.get("idle_worker_seconds")),
        number(run.get("utilization"), ".0%"), number(run["parent_store"], ".2f"), number(run["parent_cpu"]), number(run["workers_cpu"]), longest,
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _group_of(name: str) -> str:
    for row, group, _ in ROWS:
        if row == name:
            return group
    return ORACLE_GROUP if name.startswith("oracle: ") else OTHER


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
            "command": "python " + shlex.join([os.path.relpath(HERE), *sys.argv[1:]]),
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
