"""The phases of a case, timed on one stack: the functions a case is made of, wrapped with timers (monkeypatched).

A phase's time is the time inside its functions minus the time inside any other phase's functions they call; whatever
runs inside none is ``other``, so the rows add up to the measured wall time. sweep_profile.py and contention.py time
cases so.
"""

from __future__ import annotations

import collections
import functools
import time

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


def group_of(name: str) -> str:
    for row, group, _ in ROWS:
        if row == name:
            return group
    return ORACLE_GROUP if name.startswith("oracle: ") else OTHER
