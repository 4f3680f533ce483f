"""``torchsleuth.check``: one op, one call, every oracle a pointed run has; ``assert_clean()`` for a test.

Design note. A kernel author's question is "is my op right?", asked from a
test. ``check`` makes the op an entry of the catalog (``cases.opinfo.register``)
under a name of its own, sweeps it as ``torchsleuth ops --ops NAME`` would
(deep: every sample, the value and argument searches, the cheap oracles),
in this process by default (the kernels a test registered with
``torch.library`` are seen; ``isolate=True`` runs it in a worker process,
which imports the op's module first), and hands back the sweep's result with
each finding's repro script: its text always (``CheckResult.scripts``), a
file only where the user asked (``out=``, ``write_repros``; the pytest
plugin's ``--torchsleuth-report``). Without ``out=`` the store lives in a
temporary folder removed before ``check`` returns: a test run leaves nothing
behind. Samples come from the user (``entries``),
or, for an op with a schema (an aten overload, a ``torch.library`` custom op),
from the schema (``cases.schema``). ``reference`` (the eager composition a
fused kernel replaces) becomes the float64 reference. Nothing here judges:
the pipeline does, as for every other op.
"""

from __future__ import annotations

import contextlib
import inspect
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

from .. import dtypes as dtype_names
from ..cases import opinfo, select
from ..cases.reach import takes_out
from ..cases.records import DEFAULT_DTYPES
from ..config import SweepConfig
from ..errors import UsageError
from ..judge.plugin import BUILTIN
from ..report import repro
from ..report.terminal import plural
from ..run.imports import IMPORTED
from ..search import registry as search_registry
from ..run.samples import forget
from ..frame import Progress, SweepResult
from ..sweep import depth, sweep
from .entries import GivenOp

# What a message says for a repro script no file holds yet: how to get one ({name}: the script's file name).
KEEP = "not kept; check(..., out=DIR) or result.write_repros(DIR) writes it as DIR/repros/{name}"


@dataclass(frozen=True)
class CheckResult:
    """What ``check`` found: the sweep's result, and each finding's repro script (its text; its path where kept)."""

    op: str  # the name the op was swept under
    sweep: SweepResult
    repros: dict[str, str]  # finding id -> its repro script's path, for a check given out= (else empty)
    scripts: dict[str, str] = field(default_factory=dict)  # finding id -> its repro script's text

    def script_name(self, finding_id: str) -> str:
        """The file name a finding's script is written under: its reported (shrunk) finding's id."""
        found = next((f for f in self.sweep.findings if f.id == finding_id), None)
        return f"{(self.sweep.reported(found).id if found is not None else finding_id)}.py"

    def write_repros(self, folder: str | Path) -> dict[str, str]:
        """Every finding's script as ``folder/repros/<id>.py``; finding id -> path."""
        target = Path(folder) / "repros"
        target.mkdir(parents=True, exist_ok=True)
        written = {}
        for finding_id, text in self.scripts.items():
            path = target / self.script_name(finding_id)
            path.write_text(text, encoding="utf-8")
            written[finding_id] = str(path)
        return written

    @property
    def findings(self):
        return tuple(self.sweep.reported(f) for f in self.sweep.findings)

    @property
    def groups(self):
        return self.sweep.groups

    @property
    def judged(self) -> int:
        """Cases whose call was made and judged (passed or found wrong); skipped, raising and failing ones are not."""
        return self.sweep.statuses.get("pass", 0) + self.sweep.statuses.get("finding", 0)

    @property
    def clean(self) -> bool:
        """No finding, and at least one case judged: a check that judged nothing is not clean, it is hollow."""
        return not self.sweep.findings and self.judged > 0

    def message(self, *, repros: Mapping[str, str] | None = None, keep: str = KEEP) -> str:
        """Every finding group: its summary, its diagnosis, and the repro script of its first finding (its path in
        ``repros``, default the check's own; else ``keep``, how to have it written); or, when no case was judged, why."""
        repros = self.repros if repros is None else repros
        if self.clean:
            return f"torchsleuth: {self.op} is clean ({self.judged} of {self.sweep.cases} cases judged)"
        if not self.sweep.findings:
            return self._hollow()
        by_id = {f.id: f for f in self.findings}
        lines = [f"torchsleuth found {plural(len(self.sweep.findings), 'finding')} in {plural(len(self.groups), 'group')} "
                 f"for {self.op} ({plural(self.sweep.cases, 'case')}):"]
        for group in self.groups:
            first = by_id.get(group.findings[0]) if group.findings else None
            lines.append(f"- {group.id}: {group.summary}")
            if group.diagnosis:
                lines.append(f"  diagnosis: {group.diagnosis}")
            if first is not None and first.detail:
                lines.append(f"  {first.detail.splitlines()[0]}")
            first_id = group.findings[0] if group.findings else ""
            if first_id in repros:
                lines.append(f"  repro: python {repros[first_id]}")
            elif first_id in self.scripts:
                lines.append(f"  repro: {keep.format(name=self.script_name(first_id))}")
            else:
                lines.append("  repro: no script (the call has no Python source)")
        return "\n".join(lines)

    def assert_clean(self) -> None:
        """Raise one AssertionError naming every finding group, its diagnosis and its repro script, or saying why no
        case was judged; nothing if clean."""
        if not self.clean:
            raise AssertionError(self.message())

    def _hollow(self) -> str:
        """Why nothing was judged: each status's most common reasons."""
        cases = self.sweep.cases
        why = []
        for status, reasons in self.sweep.reasons.items():
            for reason, count in sorted(reasons.items(), key=lambda item: -item[1])[:2]:
                why.append(f"  {status} x{count}: {reason.splitlines()[0] if reason else '(no reason given)'}")
        return "\n".join([f"torchsleuth checked nothing for {self.op}: {cases} case{'s' if cases != 1 else ''}, none judged "
                          "(each was skipped or raised; samples must be calls of the op: tuples of positional "
                          "arguments, (args, kwargs) pairs, tensors or SampleInputs)", *why])


def check(op: Any, samples: Iterable | Callable | None = None, *, reference: Callable | None = None,
          layouts: str | Iterable[str] | None = None, variants: str | Iterable[str] | None = None,
          dtypes: str | Iterable | None = None, device: str = "cpu", oracles: str | Iterable[str] | None = None,
          search: str | Iterable[str] | None = None, isolate: bool = False, out: str | Path | None = None,
          json: str | Path | None = None, junit: str | Path | None = None, db: str | Path | None = None,
          shrink: bool = True, timeout: float = 60.0, progress: Progress | None = None) -> CheckResult:
    """Sweep one op deep, as ``torchsleuth ops --ops NAME`` does, and return what was found.

    ``op``: a ``torch.library`` custom op, an aten overload (``torch.ops.aten.foo.default``) or any Python callable.
    ``samples``: calls of it (``SampleInput``-like objects, ``(args, kwargs)`` pairs as ``torch.library.opcheck``
    takes them, tuples of positional arguments, or tensors), or a
    function ``samples(dtype, device)`` making them; omitted for an op with a schema, they are generated from it.
    ``reference``: a trusted implementation with the same signature, judged in float64 in place of the op.
    ``layouts``, ``variants``, ``dtypes``, ``oracles``, ``search``: names as the CLI takes them (a comma-separated
    string or an iterable; default: every layout and variant, the samples' dtypes or the catalog's defaults, the
    cheap oracles, every search). ``isolate``: run in a worker process (the op must then be importable from its
    module). ``out``: where the store and the repro scripts go; left out, no script is written (their text is in
    ``CheckResult.scripts``; ``write_repros`` writes them) and the store is in a temporary folder removed before
    ``check`` returns. ``json``, ``junit``: the findings file and JUnit XML; ``db``: the SQLite store (default in
    ``out``).
    A check that judged no case (every call raised or was skipped) is not clean: ``assert_clean`` says why.
    """
    # what was asked, checked before anything is registered or run
    chosen_layouts, chosen_variants = select.resolve_layouts(_text(layouts)), select.resolve_variants(_text(variants))
    chosen_oracles = None if oracles is None else select.resolve_oracles(_text(oracles), BUILTIN)
    searches = search_registry.names() if search is None else (() if _text(search) == "none"
                                                       else select.resolve_names(_text(search), search_registry.names(), "search", search_registry.names()))
    if isolate and samples is not None:
        raise UsageError("isolate=True runs an op whose samples come from its schema (a worker cannot be handed samples=)")
    name, entry = _entry(op, samples, reference=reference, dtypes=_dtypes(dtypes))
    imports = _imports(op, _caller())
    wanted = _dtypes(dtypes) or (tuple(entry.supported_dtypes("cpu")) if isinstance(entry, GivenOp) else None)
    names = tuple(dtype_names.name(d) for d in wanted) if wanted else DEFAULT_DTYPES
    config = SweepConfig(
        command="check", device=device, ops=(name,), dtypes=names, layouts=chosen_layouts, variants=chosen_variants,
        workers=1 if isolate else 0, timeout=timeout, imports=imports, shrink=shrink, oracles=chosen_oracles or (), search=searches,
    )
    # no time target: a check in CI judges the same cases on a fast machine and a slow one (run.deadline)
    config = depth(config, deep=True, given={"time_target", *(("oracles",) if chosen_oracles is not None else ())})
    if not select.units(config.ops, config.dtypes, device, probe=config.probe_dtypes):
        raise UsageError(f"nothing to check: {name} takes none of {', '.join(names)} on {device} (every sample raised)")
    scratch = Path(tempfile.mkdtemp(prefix="torchsleuth-check-")) if out is None and db is None else None  # the store's
    try:
        with _loaded(imports):
            result = sweep(config, db=db or Path(out or scratch) / "runs.db", progress=progress, out=out, json=json, junit=junit)
            folder = Path(out) / "repros" if out is not None else None
            repros = {f.id: str(folder / f"{result.reported(f).id}.py") for f in result.findings
                      if folder is not None and (folder / f"{result.reported(f).id}.py").is_file()}
            # the scripts' text, made while the op's module counts as loaded (a script imports it first)
            scripts = {f.id: Path(repros[f.id]).read_text(encoding="utf-8") if f.id in repros
                       else repro.script(result.reported(f), oracles=BUILTIN, imports=config.imports) for f in result.findings}
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return CheckResult(op=name, sweep=result, repros=repros, scripts=scripts)


def _text(value: str | Iterable[str] | None) -> str | None:
    return value if value is None or isinstance(value, str) else ",".join(value)


def _dtypes(value) -> tuple[torch.dtype, ...] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(d if isinstance(d, torch.dtype) else dtype_names.parse(d.strip()) for d in items)


def _overload(op: Any):
    """The OpOverload behind ``op`` (a custom op's, a packet's only one), or None for a plain callable."""
    op = getattr(op, "_opoverload", op)  # torch.library.custom_op's CustomOpDef
    if isinstance(op, torch._ops.OpOverloadPacket):
        kernels = [name for name in op.overloads() if _has_kernel(getattr(op, name)) and not takes_out(getattr(op, name))]
        if len(kernels) != 1:
            raise UsageError(f"{op} has overloads {', '.join(kernels or op.overloads())}: pass one (torch.ops.{op}.OVERLOAD)")
        return getattr(op, kernels[0])
    return op if isinstance(op, torch._ops.OpOverload) else None


def _has_kernel(overload) -> bool:
    """Whether the dispatcher has the overload (TorchScript-only ones, ``aten::add.str``, it has not)."""
    try:
        return torch._C._dispatch_has_kernel(overload.name())
    except RuntimeError:
        return False


def _entry(op: Any, samples, *, reference, dtypes) -> tuple[str, Any]:
    """The name ``op`` is swept under and its catalog entry, registered in this process."""
    overload = _overload(op)
    if overload is None and not callable(op):
        raise UsageError(f"cannot check {op!r}: give a torch.library custom op, an aten overload or a Python callable")
    if samples is None:
        if overload is None:
            raise UsageError(f"{_qualname(op)} has no schema to make samples from: give samples= (calls of it, or a "
                             "function of dtype and device making them)")
        from ..cases import schema

        name = str(overload)
        entry = schema.SchemaOp(name, overload)
    else:
        function = overload or op
        name = _qualname(op)
        try:
            entry = GivenOp(name, function, samples, dtypes=dtypes, public=_public(op, overload))
        except (TypeError, ValueError) as e:
            raise UsageError(f"bad samples= for {_qualname(op)}: {e}") from None
    if reference is not None:
        entry.reference = reference  # a fresh entry of this check's own (run.references reads it)
    opinfo.register(name, entry)  # a name checked before is checked anew, with what was given now
    forget(name)
    return name, entry


def _qualname(op: Any) -> str:
    overload = _overload(op)
    if overload is not None:
        return str(overload)
    return f"{getattr(op, '__module__', '') or 'callable'}.{getattr(op, '__qualname__', type(op).__name__)}"


def _public(op: Any, overload) -> str:
    """A Python expression a repro script calls the op by: the overload, or the callable loaded from its file."""
    if overload is not None:
        return f"torch.ops.{overload}"
    path = _source_file(op)
    qualname = getattr(op, "__qualname__", "")
    if not path or not qualname or "<locals>" in qualname:
        return ""
    attributes = "".join(f"[{part!r}]" if i == 0 else f".{part}" for i, part in enumerate(qualname.split(".")))
    return f"__import__('runpy').run_path({path!r}, run_name='__torchsleuth_check__'){attributes}"


def _source_file(thing: Any) -> str:
    try:
        return str(Path(inspect.getfile(thing)).resolve())
    except (TypeError, OSError):
        return ""


def _imports(op: Any, caller: str) -> tuple[str, ...]:
    """What a worker and a repro script must import first to have ``op``: the file defining a custom op (the
    caller's, ``caller``, when the op does not say)."""
    overload = _overload(op)
    if overload is None or overload.namespace == "aten":
        return ()
    path = _source_file(getattr(op, "_init_fn", None) or op) or caller
    return (path,) if path else ()


@contextlib.contextmanager
def _loaded(imports: tuple[str, ...]):
    """While the sweep runs, ``imports`` count as loaded in this process (they are: the op exists), so the sweep
    does not run them again (a custom op registered twice raises) and the oracles' scripts name them; after it,
    the process's record is as it was, so a later run's scripts do not import them."""
    added = [path for path in imports if path not in IMPORTED]
    for path in added:
        IMPORTED[path] = next((m for m in list(sys.modules.values()) if _module_file(m) == path), None)
    try:
        yield
    finally:
        for path in added:
            IMPORTED.pop(path, None)


def _caller() -> str:
    """The file of the first frame up the stack outside torchsleuth (the test that called ``check``, or the plugin)."""
    package = Path(__file__).resolve().parent.parent
    frame = sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename).resolve()
        if package not in path.parents and path.is_file():
            return str(path)
        frame = frame.f_back
    return ""


def _module_file(module) -> str:
    file = getattr(module, "__file__", None)
    return str(Path(file).resolve()) if file else ""
