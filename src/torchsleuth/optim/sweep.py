"""``optim.sweep``: the optimizer matrix end to end, into the store; and what it leaves on disk.

Design note. The matrix runs in this process, one configuration after the
other, in the order ``plan.plan`` gives (each baseline before what is
judged against it; references are computed once and shared), on one CPU
thread: the parameters have at most 240 elements, too few for a kernel to
split, and on a busy machine the other threads' barriers cost a fused
step tens of milliseconds (bench/optim.md); the thread count is restored
after. Each
configuration becomes one ``Outcome`` in the store, keyed by its case id,
so a killed run resumes where it stopped, as ``torchsleuth ops`` does: the
unfinished run with the same config key is continued and its stored
configurations are not run again. The run goes through the run frame
(``torchsleuth.frame.run_frame``), as every command's does: the result is
read back from the store and the outputs asked for are written (with this
package's repro scripts), so the terminal summary, the findings file and
``torchsleuth report`` show an optim run as they show an ops run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Iterable
from pathlib import Path

from ..judge.records import Finding, Outcome
from ..report import outputs
from ..run.imports import load_imports
from ..frame import Progress, SweepResult, run_frame
from . import contracts, edges, judge, matrix, plan, repro, run as running
from .matrix import Configuration, OptimConfig, OptimSpec


class _References:
    """The baseline and float64 runs of each optimizer, option and dtype, computed once."""

    def __init__(self, config: OptimConfig):
        self.config = config
        self._baselines: dict[tuple, running.Ran] = {}
        self._exact: dict[tuple, running.Exact] = {}
        self._verdicts: dict[tuple, tuple] = {}

    @staticmethod
    def _key(configuration: Configuration) -> tuple:
        return (configuration.optimizer, configuration.option.name, configuration.dtype)

    def baseline(self, spec: OptimSpec, configuration: Configuration) -> running.Ran:
        key = self._key(configuration)
        if key not in self._baselines:
            self._baselines[key] = running.baseline(spec, configuration, self.config)
        return self._baselines[key]

    def exact(self, spec: OptimSpec, configuration: Configuration) -> running.Exact:
        key = self._key(configuration)
        if key not in self._exact:
            self._exact[key] = running.exact(spec, configuration, self.config)
        return self._exact[key]

    def precision(self, spec: OptimSpec, configuration: Configuration, ran: running.Ran) -> tuple:
        """Findings of ``ran`` against float64 (none when the float64 run itself raised)."""
        exact = self.exact(spec, configuration)
        if exact.ran.trajectory is None:
            return ()
        return judge.findings(configuration, ran.trajectory, exact.ran.trajectory, reference="precision",
                              sensitivity=exact.sensitivity, u=exact.u, steps=self.config.steps)

    def verdict(self, spec: OptimSpec, configuration: Configuration) -> tuple:
        """The baseline's findings against float64 (it must have run)."""
        key = self._key(configuration)
        if key not in self._verdicts:
            self._verdicts[key] = self.precision(spec, configuration, self.baseline(spec, configuration))
        return self._verdicts[key]

    def sound(self, spec: OptimSpec, configuration: Configuration) -> bool:
        """Whether the baseline ran and agrees with float64: only then are the others judged against it."""
        if self.baseline(spec, configuration).trajectory is None:
            return False
        return not any(f.reference == "precision" for f in self.verdict(spec, configuration))


def sweep(config: OptimConfig, *, db: str | Path, progress: Progress | None = None, out: str | Path | None = None,
          json: str | Path | None = None, junit: str | Path | None = None) -> SweepResult:
    """Run the matrix ``config`` selects into the store at ``db``; the run as stored, its outputs written.

    ``out`` gets a repro script per finding (``out/repros``), ``json`` the
    findings file, ``junit`` JUnit XML. The progress counts configurations.
    """
    load_imports(config.imports)
    specs = {s.name: s for s in matrix.discover(config.optimizers)}
    with run_frame(config, db=db, progress=progress, out=out, json=json, junit=junit, scripts=scripts(config)) as frame:
        planned = plan.plan(list(specs.values()), config)
        done = set()
        for unit in {c.case.unit for c in planned}:
            done |= frame.store.cases_done(frame.run.id, unit)
        if not frame.resumed:
            for s in specs.values():
                for parameter, why in s.refused if s.params else ():
                    frame.note("optim", f"{s.name} runs without {parameter}: it refused it ({why})")
            for line in plan.notes(list(specs.values()), config):
                frame.note("optim", line)
        frame.start(units=len(planned), done=sum(c.case.id in done for c in planned))
        references = _References(config)
        with _one_thread():
            for configuration in planned:
                if configuration.case.id not in done:
                    frame.record(_outcome(configuration, specs[configuration.optimizer], config, references))
    return frame.result


@contextlib.contextmanager
def _one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _outcome(configuration: Configuration, spec: OptimSpec, config: OptimConfig, references: _References) -> Outcome:
    case = configuration.case
    started = time.monotonic()
    if configuration.skip:
        return Outcome(case=case, status="skip", reason=f"{configuration.optimizer}: {configuration.skip}")
    try:
        status, reason, found = _judge(configuration, spec, config, references)
    except Exception as e:  # a bug in torchsleuth, not in the optimizer: shown apart, the matrix goes on
        status, reason, found = "error", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}", ()
    if status == "pass" and found:
        status = "finding"
    return Outcome(case=case, status=status, reason=reason, findings=found, seconds=time.monotonic() - started)


def _judge(configuration: Configuration, spec: OptimSpec, config: OptimConfig, references: _References) -> tuple[str, str, tuple]:
    if configuration.is_baseline:
        ran = references.baseline(spec, configuration)
    else:
        ran = running.run(spec, configuration, config)
    if ran.trajectory is None:  # named by optimizer: the summary counts reasons, and "view size..." alone names nothing
        return ran.status, f"{configuration.optimizer}: {ran.reason}", ()
    if configuration.zero:  # the zero-gradient contract alone: no reference
        return "pass", "", (contracts.unkept(configuration, spec, ran.trajectory, steps=config.steps)
                            + judge.outside(configuration, ran.trajectory, config.steps))
    exact = references.exact(spec, configuration)
    if configuration.is_baseline or not references.sound(spec, configuration):
        if exact.ran.trajectory is None:
            return "skip", f"{configuration.optimizer}: no reference, the float64 for-loop run raised {exact.ran.reason}", ()
        found = references.verdict(spec, configuration) if configuration.is_baseline else references.precision(spec, configuration, ran)
    else:
        found = judge.findings(configuration, ran.trajectory, references.baseline(spec, configuration).trajectory,
                               reference="layout", sensitivity=exact.sensitivity, u=exact.u, steps=config.steps)
    return "pass", "", found + _contracts(configuration, spec, config, references, ran, exact)


def _contracts(configuration, spec, config, references: _References, ran: running.Ran, exact: running.Exact) -> tuple:
    """The lr=0 contract of a seeded run, and the tensor-form contract of a baseline (contracts.py)."""
    found = ()
    if not config.edges:
        return found
    if not contracts.lr_zero(spec, configuration.option):
        found += contracts.unkept(configuration, spec, ran.trajectory, steps=config.steps, exact=exact.ran.trajectory,
                                  sensitivity=exact.sensitivity)
    plain = edges.number_form(spec, configuration.option) if configuration.is_baseline else None
    if plain is not None:
        numbers = references.baseline(spec, dataclasses.replace(configuration, option=plain))
        if numbers.trajectory is not None:
            found += contracts.tensor_form(configuration, spec, ran.trajectory, numbers.trajectory, steps=config.steps,
                                           sensitivity=exact.sensitivity, u=exact.u)
    return found


def scripts(config: OptimConfig) -> outputs.Scripts:
    """The repro script writer of an optim run (report.outputs hands it the findings and the folder)."""
    return functools.partial(_write_scripts, config=config)


def _write_scripts(findings: Iterable[Finding], out: Path, *, config: OptimConfig) -> dict[str, Path]:
    findings = list(findings)
    specs = {name: matrix.spec(name) for name in {f.opinfo for f in findings}}
    return repro.write_scripts(findings, specs, config, out)
