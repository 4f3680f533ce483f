"""``optim.sweep``: the optimizer matrix end to end, into the store; and what it leaves on disk.

Design note. The matrix runs in this process, one configuration after the
other, in the order ``matrix.plan`` gives (each baseline before what is
judged against it; references are computed once and shared). Each
configuration becomes one ``Outcome`` in the store, keyed by its case id,
so a killed run resumes where it stopped, as ``torchsleuth ops`` does: the
unfinished run with the same config key is continued and its stored
configurations are not run again. The result is read back from the store
(``torchsleuth.sweep.result``), so the terminal summary, the findings file
and ``torchsleuth report`` show an optim run as they show an ops run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from .. import _version
from ..judge.records import Outcome
from ..report import findings_file, groups as grouping
from ..store.sqlite import Store
from ..sweep import SweepResult, load_imports, result as stored_result
from . import judge, matrix, repro, run as running
from .matrix import Configuration, OptimConfig, OptimSpec


class Progress(Protocol):
    def start(self, *, total: int, done: int, resumed: bool) -> None: ...
    def outcome(self, outcome: Outcome) -> None: ...
    def finish(self) -> None: ...


class _Silent:
    def start(self, *, total, done, resumed): pass
    def outcome(self, outcome): pass
    def finish(self): pass


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


def sweep(config: OptimConfig, *, db: str | Path, progress: Progress | None = None) -> SweepResult:
    """Run the matrix ``config`` selects into the store at ``db``; the run as stored."""
    import torch

    progress = progress or _Silent()
    load_imports(config.imports)
    store = Store(db)
    try:
        run, resumed = store.start(config, torch_version=torch.__version__, version=_version.__version__)
        specs = {s.name: s for s in matrix.discover(config.optimizers)}
        planned = matrix.plan(list(specs.values()), config)
        done = set()
        for unit in {c.case.unit for c in planned}:
            done |= store.cases_done(run.id, unit)
        if not resumed:
            for s in specs.values():
                for parameter, why in s.refused if s.params else ():
                    store.note(run.id, "optim", f"{s.name} runs without {parameter}: it refused it ({why})")
        progress.start(total=len(planned), done=sum(c.case.id in done for c in planned), resumed=resumed)
        references = _References(config)
        started = time.monotonic()
        try:
            for configuration in planned:
                if configuration.case.id in done:
                    continue
                outcome = _outcome(configuration, specs[configuration.optimizer], config, references)
                store.add(run.id, outcome)
                progress.outcome(outcome)
        finally:
            store.add_seconds(run.id, time.monotonic() - started)
            store.commit()
            progress.finish()
        store.finish(run.id)
        return stored_result(store, run.id, resumed=resumed)
    finally:
        store.close()


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
    if configuration.is_baseline or not references.sound(spec, configuration):
        exact = references.exact(spec, configuration)
        if exact.ran.trajectory is None:
            return "skip", f"{configuration.optimizer}: no reference, the float64 for-loop run raised {exact.ran.reason}", ()
        if configuration.is_baseline:
            return "pass", "", references.verdict(spec, configuration)
        return "pass", "", references.precision(spec, configuration, ran)
    found = judge.findings(configuration, ran.trajectory, references.baseline(spec, configuration).trajectory,
                           reference="layout", sensitivity=references.exact(spec, configuration).sensitivity,
                           u=references.exact(spec, configuration).u, steps=config.steps)
    return "pass", "", found


def write_outputs(result: SweepResult, config: OptimConfig, *, out: str | Path, json_path: str | None) -> tuple[list, dict[str, str]]:
    """Repro scripts into ``out/repros`` and, when asked, the findings file; returns the groups and what went where."""
    groups = list(result.groups) or grouping.group(result.findings)
    written: dict[str, str] = {}
    paths: dict[str, Path] = {}
    if result.findings:
        specs = {name: matrix.spec(name) for name in {f.opinfo for f in result.findings}}
        paths = repro.write_scripts(result.findings, specs, config, out)
        written["repro scripts"] = str(Path(out) / "repros")
    if json_path:
        findings_file.write(
            json_path, command=result.run.command, device=result.run.device, torch_version=result.run.torch,
            cases=result.cases, seconds=result.seconds, findings=result.findings, groups=groups, repro_paths=paths,
        )
        written["findings file"] = json_path
    return groups, written
