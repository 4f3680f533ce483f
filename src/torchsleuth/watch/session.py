"""``torchsleuth.watch()``: a block of a training program, watched; what it found, stored and reported.

Design note. Entering the block installs, process-wide and until it exits:

* global optimizer step hooks (``torch.optim.optimizer.register_optimizer_step_pre_hook``
  and ``..._post_hook``): the invariants around each step (watch.invariants),
  the step count, and the names of parameters and optimizer state for the
  shadow replay's findings;
* global module forward hooks, so a finding says which module's forward
  issued its op;
* unless ``invariants_only``, the shadow replay's dispatch mode
  (watch.shadow).

On exit the findings (invariants first, then the ops in the order they
failed) are stored as a run of command ``watch`` in the same SQLite store as
``torchsleuth ops`` (``db``), through the run frame every command's run goes
through (frame.run_frame), so ``report``, ``diff`` and ``repro`` read them
the same way, the result is the same ``SweepResult``, and the outputs asked
for (``out``, ``json``, ``junit``) are written as the other commands write them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from ..cases.records import Case
from ..errors import UsageError, one_line
from ..judge.records import Finding, Outcome
from ..report import outputs
from ..frame import Frame, run_frame
from . import names as naming
from .invariants import StepChecks
from .parity import Recorder
from .shadow import Context, ShadowMode
from .sharded import ShardedShadow


@dataclass(frozen=True, kw_only=True, slots=True)
class WatchConfig:
    """What was watched and how (stored with the run, like an ops sweep's config)."""

    command: str = "watch"
    device: str = "cpu"
    program: str = ""  # the script and its arguments, or the block's caller
    every: int = 1
    sample: float = 1.0
    invariants_only: bool = False
    repeats: bool = False  # judge every call, not each distinct call once (watch.shadow)
    all_steps: bool = False  # check the invariants at every step, not as watch.cadence chooses
    ranks: int = 0  # a sharded program's world size (watch.ranks); 0: one process, not launched
    parity: bool = False  # record each step's loss and full gradients (watch.parity)
    imports: tuple[str, ...] = ()  # the --import modules, which the repro scripts of a sharded run import first

    def key(self) -> str:
        # every watch is a run of its own: a program is not resumed
        return hashlib.sha256(json.dumps([dataclasses.asdict(self), time.time()]).encode()).hexdigest()[:16]


class Watch:
    """What a watched block found so far; ``result`` once the block has ended."""

    def __init__(self, config: WatchConfig, rank: int = 0):
        self.config = config
        self.checks = StepChecks(config.device, all_steps=config.all_steps)
        self.context = Context()
        knobs = dict(every=config.every, sample=config.sample, repeats=config.repeats)
        if config.invariants_only:
            self.shadow = None
        elif config.ranks:  # a rank of a sharded program: its DTensor calls judged too (watch.sharded)
            self.shadow = ShardedShadow(self.context, rank=rank, world=config.ranks, **knobs)
        else:
            self.shadow = ShadowMode(self.context, **knobs)
        self.parity = Recorder(self.context, self.checks.name, rank=rank) if config.parity else None
        self.result = None
        self.started = time.monotonic()  # when the watch began: the run's time counts from here
        self.failure = ""  # why the watched program failed (it raised, or exited non-zero): the run is stored as failed

    @property
    def findings(self) -> list[Finding]:
        self.checks.flush()  # the last step's verdicts, read a step late
        return self.checks.findings + (self.shadow.findings if self.shadow else [])

    # --- hooks ------------------------------------------------------------------------

    def _pre_step(self, optimizer, args, kwargs) -> None:
        if _within_a_step():
            return
        self.context.paused = True
        self.checks.before(optimizer)
        if self.parity is not None:
            self.parity.before_step(optimizer)
        if self.shadow is not None:
            self.context.optimizer = type(optimizer).__name__
            self.context.refresh_names = lambda: self._name_tensors(optimizer)
            self._name_tensors(optimizer)
        self.context.paused = False

    def _post_step(self, optimizer, args, kwargs) -> None:
        if _within_a_step():
            return
        self.context.paused = True
        self.checks.after(optimizer)
        self.context.optimizer = ""
        self.context.refresh_names = lambda: None
        self.context.step += 1
        self.context.paused = False

    def _name_tensors(self, optimizer) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                name = self.checks.name(p)
                self.context.tensor_names[naming.address(p)] = name
                if p.grad is not None:
                    self.context.tensor_names[naming.address(p.grad)] = f"the gradient of {name}"
                for key, value in optimizer.state.get(p, {}).items():
                    if isinstance(value, torch.Tensor) and value.numel() > 1:
                        self.context.tensor_names[naming.address(value)] = f"{key} of {name} (optimizer state)"

    def _forward_pre(self, module, args) -> None:
        if self._modules is None or id(module) not in self._modules:
            self.context.paused = True
            self._modules = naming.module_names()
            self.context.paused = False
        self.context.modules.append(self._modules.get(id(module), type(module).__name__))

    def _forward_post(self, module, args, output) -> None:
        if self.context.modules:
            self.context.modules.pop()

    @contextlib.contextmanager
    def active(self) -> Iterator["Watch"]:
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim_module

        self._modules = None
        handles = [
            optim_module.register_optimizer_step_pre_hook(self._pre_step),
            optim_module.register_optimizer_step_post_hook(self._post_step),
        ]
        if self.shadow is not None:  # which module issued an op: only the shadow replay's findings say
            handles += [
                nn_module.register_module_forward_pre_hook(self._forward_pre),
                nn_module.register_module_forward_hook(self._forward_post),
            ]
        if self.parity is not None:
            self.parity.install()
        try:
            if self.shadow is not None:
                with self.shadow:
                    yield self
            else:
                yield self
        finally:
            for handle in handles:
                handle.remove()
            if self.parity is not None:
                self.parity.remove()


def _within_a_step() -> bool:
    """Whether the step whose hook calls this runs within another optimizer step: a subclass's ``step`` calling its
    parent's (torch hooks the step of every optimizer class that made an instance) or an optimizer stepping the one
    it wraps. Such a step is part of the outer one: its hooks do nothing. Asked of the stack (is torch's hooking
    wrapper, the code that called this hook, running further up?), not counted, so a step that raised before its
    post-step hooks leaves nothing behind."""
    wrapper = sys._getframe(2)  # this <- the hook <- torch's wrapper of the step
    frame = wrapper.f_back
    while frame is not None:
        if frame.f_code is wrapper.f_code:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def watch(*, db: str | None = None, every: int = 1, sample: float = 1.0, invariants_only: bool = False,
          repeats: bool = False, all_steps: bool = False, device: str = "cpu", program: str = "", out: str | Path | None = None,
          json: str | Path | None = None, junit: str | Path | None = None, ranks: int = 0, rank: int = 0,
          parity: bool = False) -> Iterator[Watch]:
    """Watch the block: invariants around the optimizer steps (watch.cadence), and (unless ``invariants_only``) its ops judged.

    Each distinct call (op, tensor shapes, strides, dtypes, devices: watch.shadow)
    is judged the first time it is made; ``repeats=True`` judges every call. The invariants are checked at each of
    the first 16 steps, then within 2% of the step's time (watch.cadence); ``all_steps=True`` checks every step.

    ``with torchsleuth.watch() as w: train()`` then ``w.findings``; with ``db``
    the findings are stored as a run (``w.result`` is its ``SweepResult``), and
    ``out`` (repro scripts), ``json`` (the findings file) and ``junit`` are written.
    ``ranks``: the world size of the sharded program this process is rank ``rank`` of (watch.ranks gathers the ranks'
    findings; watch.sharded judges their DTensor calls); ``parity``: record each step's loss and full gradients (watch.parity).
    """
    if db is None and (out is not None or json or junit):
        raise UsageError("watch(out=, json=, junit=) writes what a stored run found: give db= as well")
    outputs.check(out=out, json=json, junit=junit)  # before the program runs, not after
    config = WatchConfig(device=device, program=program, every=every, sample=sample, invariants_only=invariants_only, repeats=repeats,
                         all_steps=all_steps, ranks=ranks, parity=parity)
    session = Watch(config, rank=rank)
    try:
        with session.active():
            yield session
    except BaseException as e:  # the block raised: the run is stored, as failed
        session.failure = session.failure or f"the block raised {one_line(e)}"
        raise
    finally:
        if db is not None:
            with run_frame(config, db=db, out=out, json=json, junit=junit, started=session.started) as frame:
                store(session, frame)
            session.result = frame.result


def store(session: Watch, frame: Frame) -> None:
    """The watch's findings and notes, into the frame's run."""
    for finding in session.findings:
        frame.record(Outcome(case=Case.parse(finding.case_id), status="finding", findings=(finding,)))
    judged = session.shadow.judged if session.shadow else 0
    how = "every call" if session.config.repeats else "each distinct call once"
    steps = session.context.step
    frame.note("watch", f"{steps} optimizer step{'s' if steps != 1 else ''}; {judged} op call{'s' if judged != 1 else ''} judged ({how})")
    if session.failure:
        frame.note("failed", session.failure)
    sampled = session.checks.sampled()
    if sampled:
        frame.note("watch", sampled)
    for reason, count in (session.shadow.errors.most_common() if session.shadow else ()):
        frame.note("not judged", f"{count} call(s): {reason}")
