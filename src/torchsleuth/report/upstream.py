"""A finding group as a bug report ready to file upstream: ``torchsleuth report --issue GROUP``.

Design note. A PyTorch issue wants a title, a few lines of plain torch that
fail, what was expected and what came out, the environment, and on which
releases it happens. All of it is here but the last line of judgement:

* the snippet (``scripts.snippet``, or the finding's oracle's own) of the
  group's first finding whose snippet can be written, run here before it is
  written: it must raise the ``AssertionError`` of its last line, the bug's
  own failure. The smallest is tried first (the worst element alone), then
  the whole shrunk case; a snippet that passes, or raises something else, is
  not filed; the next finding of the group is tried (three at most), then the
  full repro script, which must exit 1, and the report says the minimal
  snippet did not reproduce;
* expected against actual as the judge recorded them, with the reference
  (what the expected value is: the same call on contiguous copies, in
  float64, ...), and the trigger in one sentence: the group's diagnosis;
* the environment: torch's version and build, the CPU capability torch
  dispatches to (``torch.backends.cpu.get_cpu_capability()``), the GPU, and
  the key lines of ``torch.utils.collect_env``;
* given other interpreters (``--torch``: python executables or venvs, each
  with its own torch release), what was filed run under each: reproduces,
  does not, or cannot tell (it raised, or torch is missing).

Nothing here is judged anew; the verdict is whether the text filed fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..cases.records import VARIANT_WORDS, Case
from ..errors import UsageError
from ..judge.plugin import BUILTIN
from ..judge.records import KIND_WORDS, Finding
from ..scripts import parts
from ..scripts.snippet import TENSOR as _TENSOR, snippets
from . import groups as grouping

# Seconds one run of the snippet or the script may take under one interpreter.
RUN_SECONDS = 300
# How many of a group's findings are tried for a snippet that reproduces.
TRIES = 3
# collect_env's lines a report keeps: enough to place the build, not the whole inventory.
ENV_KEYS = ("PyTorch version", "Is debug build", "CUDA used to build PyTorch", "ROCM used to build PyTorch", "OS",
            "GCC version", "Python version", "Python platform", "Is CUDA available", "GPU models and configuration",
            "Nvidia driver version")


@dataclass(frozen=True)
class Ran:
    """What filed text did under one interpreter."""

    python: str
    torch: str  # its torch.__version__, "" when torch would not import
    verdict: str  # "reproduces", "does not reproduce", "cannot tell"
    output: str  # the tail of what it printed


@dataclass(frozen=True)
class Issue:
    group: str
    finding: Finding
    title: str
    text: str  # the markdown
    minimal: bool  # the snippet was filed (else the full script)
    fallback: str = ""  # why the snippet was not filed
    runs: tuple[Ran, ...] = field(default_factory=tuple)


def build(store, run, ident: str, *, script: Callable[[Finding], str], pythons: Sequence[str] = ()) -> Issue:
    """The report of group or finding ``ident`` of stored run ``run``; ``script`` writes a finding's full repro."""
    findings, groups = grouping.of_run(store, run.id)
    group = _find(ident, groups, run.id)
    shrunk = store.shrunk(run.id)
    by_id = {f.id: f for f in findings}
    members = [shrunk[i].reported(by_id[i]) if i in shrunk else by_id[i] for i in group.findings if i in by_id]
    if ident.startswith("f-"):
        members.sort(key=lambda f: not f.id.startswith(ident))  # the finding asked for first
    chosen, filed, why, ran = None, "", "", None
    for finding in members[:TRIES]:
        texts, why_not = _snippets(finding)
        why = why or why_not
        for text in texts:
            tried = run_under(sys.executable, text, snippet=True)
            if tried.verdict == "reproduces":
                chosen, filed, ran = finding, text, tried
                break
            why = f"the minimal snippet of {finding.id} " + ("passes here" if tried.verdict == "does not reproduce" else f"raises: {tried.output}")
        if chosen is not None:
            break
    is_minimal = chosen is not None
    if chosen is None:
        chosen = members[0]
        filed = script(chosen)
        ran = run_under(sys.executable, filed, snippet=False)
    finding = chosen
    runs = (ran,) + tuple(run_under(python, filed, snippet=is_minimal) for python in pythons)
    title = _title(finding, group)
    text = _markdown(title, group, finding, run, filed, is_minimal, "" if is_minimal else why, runs)
    return Issue(group=group.id, finding=finding, title=title, text=text, minimal=is_minimal,
                 fallback="" if is_minimal else why, runs=runs)


def _snippets(finding: Finding) -> tuple[list[str], str]:
    """A finding's snippets to try: its oracle's (``Oracle.snippet``), else the references' (``scripts.snippet``)."""
    own = BUILTIN.snippet(finding)
    return ([own], "") if own else snippets(finding)


def _find(ident: str, groups: list[grouping.Group], run_id: int) -> grouping.Group:
    """The group ``ident`` names: a group id or a finding id, whole or a unique prefix."""
    ident = ident.strip()
    hits = [g for g in groups if g.id.startswith(ident) or any(f.startswith(ident) for f in g.findings)]
    if len(hits) == 1 and ident[:2] in ("g-", "f-") and len(ident) > 2:
        return hits[0]
    known = ", ".join(g.id for g in groups[:6]) or "none"
    what = "is in several groups" if len(hits) > 1 else "names no group or finding"
    raise UsageError(f"{ident!r} {what} of run {run_id}; give a group id (g-...) or a finding id (f-...): {known}")


def _python(path: str) -> str:
    """A python executable: ``path`` itself, or a venv's ``bin/python``."""
    p = Path(path)
    if p.is_dir():
        p = p / "bin" / "python"
    if not p.is_file() or not os.access(p, os.X_OK):
        raise UsageError(f"--torch {path!r} is no python executable nor a venv holding bin/python")
    return str(p)


def check_pythons(paths: Sequence[str]) -> list[str]:
    """Each ``--torch`` path as a python executable, checked before any work (a bad path is one usage error)."""
    return [_python(p) for p in paths]


# Runs a file as __main__ after printing the torch it runs on: one interpreter start a run, not two.
_RUNNER = "import sys, runpy; import torch; print('torch', torch.__version__, flush=True); runpy.run_path(sys.argv[1], run_name='__main__')"


def run_under(python: str, text: str, *, snippet: bool) -> Ran:
    """``text`` run by ``python``: a snippet reproduces when its last line raises AssertionError, the full script
    when it exits 1 saying BUG PRESENT."""
    with tempfile.TemporaryDirectory(prefix="torchsleuth-issue-") as folder:
        path = Path(folder) / ("snippet.py" if snippet else "repro.py")
        path.write_text(text, encoding="utf-8")
        try:
            done = subprocess.run([python, "-c", _RUNNER, str(path)], capture_output=True, text=True, timeout=RUN_SECONDS, cwd=folder)
        except subprocess.TimeoutExpired:
            return Ran(python, "", "cannot tell", f"still running after {RUN_SECONDS} s")
    first, _, rest = done.stdout.partition("\n")
    if not first.startswith("torch "):
        return Ran(python, "", "cannot tell", _tail(done.stderr) or "torch does not import")
    version, output = first.removeprefix("torch "), (rest + done.stderr).strip()
    if snippet:
        failed = done.returncode != 0 and "AssertionError" in done.stderr and f'"{path}", line {text.count(chr(10))}' in done.stderr
        verdict = "reproduces" if failed else "does not reproduce" if done.returncode == 0 else "cannot tell"
    else:
        verdict = {1: "reproduces", 0: "does not reproduce"}.get(done.returncode, "cannot tell")
    return Ran(python, version, verdict, _tail(output))


def _tail(output: str, lines: int = 12) -> str:
    """The end of what ran printed: from the last exception's own line on (assert_close's message, not the frames
    above it), else the last lines."""
    kept = output.splitlines()
    raised = [i for i, line in enumerate(kept) if line.startswith(("AssertionError", "Traceback"))]
    if raised and kept[raised[-1]].startswith("AssertionError"):
        kept = kept[raised[-1]:]
    return "\n".join(kept[-lines:])


def _title(finding: Finding, group: grouping.Group) -> str:
    where = f"({finding.dtype}, {finding.device})"
    head = f"{finding.name}{VARIANT_WORDS.get(finding.variant, f' ({finding.variant})')}"
    first = group.diagnosis.split(";", 1)[0].rstrip(".") if group.diagnosis else ""
    if " when " in first:
        return f"{first} {where}"
    m = finding.mismatch
    if m is not None and m.attribute == "values":
        return f"{head} gives {m.actual} where {m.expected} is expected {where}"
    return f"{head} {KIND_WORDS.get(finding.kind, f'shows {finding.kind}')} {where}"


def _markdown(title: str, group: grouping.Group, finding: Finding, run, filed: str, is_minimal: bool, why: str,
              runs: Sequence[Ran]) -> str:
    here = runs[0]
    lines = [f"# {title}", "", "## Reproduce", ""]
    if not is_minimal:
        lines += [f"No minimal snippet reproduces this ({why or 'none could be written'}); the full repro script "
                  "below does (it needs only torch, prints the call and its reference, and exits 1 while the bug is "
                  "present).", ""]
    lines += ["```python", filed.rstrip("\n"), "```", "",
              f"Output on torch {here.torch} ({here.verdict}):", "", "```text", here.output, "```", ""]
    lines += ["## Expected and actual", ""] + _expected(finding) + [""]
    lines += ["## Trigger", "", group.diagnosis or group.summary, ""]
    edits = Case.parse(finding.case_id).edits
    if edits:
        lines += [f"The case: `{finding.case_id}` (its edits `{';'.join(edits)}` name how the sample was changed).", ""]
    if len(runs) > 1:
        # the releases alone: the interpreters' paths are this machine's, nothing an upstream reader can use
        lines += ["## Releases", "", "| torch | result |", "| --- | --- |"]
        lines += [f"| {r.torch or f'? (torch did not import in {Path(r.python).parent.parent.name})'} | {r.verdict} |" for r in runs] + [""]
        untold = [f"- torch {r.torch or '?'}: {(r.output.strip().splitlines() or ['no output'])[-1]}" for r in runs if r.verdict == "cannot tell"]
        lines += ["Where it cannot tell, what was raised:", "", *untold, ""] if untold else []
    lines += ["## Environment", ""] + environment(finding.device) + [""]
    lines += [f"Found by torchsleuth (group {group.id}, finding {finding.id}, run {run.id} on torch {run.torch}).", ""]
    return "\n".join(lines)


def _expected(finding: Finding) -> list[str]:
    m = finding.mismatch
    what = {"arbitrary-precision": "the exact value, by mpmath"}.get(finding.reference, "the finding's reference")
    if finding.call is not None and finding.reference in ("layout", "precision", "device") and finding.call.function:
        what = parts.reference_source(finding, finding.call)[1]
    named = finding.call is not None and finding.call.function
    lines = [f"- call: `{_TENSOR.sub(lambda m: m.group(2), parts.call_source(finding.call))}`" if named else f"- op: `{finding.op}`",
             f"- reference ({finding.reference}): {what}"]
    if m is None:
        return lines + [f"- {finding.summary}"]
    if m.attribute != "values":
        return lines + [f"- {m.describe()}"]
    at = f" at index {list(m.worst_index)}" if m.worst_index else ""
    lines.append(f"- expected `{m.expected}`, actual `{m.actual}`{at} ({m.mismatched} of {m.numel} elements differ)")
    allowed = f"{m.allowed:.3g}" if m.allowed is not None else f"atol={m.atol:.3g}, rtol={m.rtol:.3g}"
    if m.max_abs_err is not None:
        lines.append(f"- error {m.max_abs_err:.4g}; allowed {allowed}")
    return lines


def environment(device: str) -> list[str]:
    """torch's version and build, the CPU capability, the GPU, and collect_env's key lines."""
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else f"ROCm {torch.version.hip}" if torch.version.hip else "CPU only"
    lines = [f"- torch {torch.__version__} (git {torch.version.git_version[:10]}), build: {build}",
             f"- CPU capability: {torch.backends.cpu.get_cpu_capability()}"]
    if device.startswith("cuda"):
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none on the machine writing this report"
        lines.append(f"- GPU: {gpu}")
    try:
        from torch.utils import collect_env

        info = collect_env.get_pretty_env_info()
    except Exception as e:  # collect_env shells out (pip, nvidia-smi): a broken tool must not lose the report
        return lines + [f"- collect_env failed: {parts.one_line(str(e))}"]
    kept = [line for line in info.splitlines() if line.split(":", 1)[0] in ENV_KEYS]
    return lines + ["", "```text", *kept, "```"]
