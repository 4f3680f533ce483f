"""Whose crash it is: a crash counts against the op only where a standalone script of its own reproduces it.

Design note. A crash finding is a worker that died in a case, twice (the pool
replays the case alone first). A case is more than its call: the sweep makes
the call under its trace's dispatch mode, an oracle takes derivatives, and
the worker is torchsleuth's process, with its modules, threads and state. So
after shrinking, each crash group's first finding gets its repro script,
the ladder of scripts.steps (the call, then the derivatives the case took,
then each of these under a dispatch mode that passes every op on, each step
in a child), and the script is run as a user would run it, in a process of
its own, with the run's ``--import`` modules:

* a step crashes: the crash is the op's. The group is diagnosed with the
  least setup that crashes, and each of its findings records it
  (``Shrunk.setup``): its summary, the findings file and the repro script's
  header say it;
* no step crashes: the crash was torchsleuth's own. Its findings are
  re-filed (``Shrunk`` status ``internal``): listed apart as internal
  failures, neither findings against the op nor counted in the exit status;
* the script cannot tell (a step hangs, the script raises or runs out of
  time): the findings stay crashes of the op, and a note says they are
  unattributed and why.

One ladder per group (a group is one bug), its verdict each of its findings'.
The ladders run side by side, as many as the sweep has workers, each within
``LADDER_SECONDS`` and all within ``BUDGET_SECONDS``: a group not begun by
then, or cut short by it, is left as found, unattributed, and a note says so. A crash in
another oracle's own calls (a vmap, tiled tensors, a compile, a large probe)
has no ladder (``steps.derivatives`` is None) and is left as found; so is a
crash whose call was not recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from ..cases.records import VARIANT_WORDS
from ..config import SweepConfig
from ..judge.records import Finding
from ..run.deadline import finish
from ..scripts import parts, steps
from .records import Diagnosis, Shrunk

# One ladder's script may run this long (a step that hangs costs steps.STEP_SECONDS of it).
LADDER_SECONDS = 180.0
# Every ladder of a run together: past this, the groups not begun are left unattributed.
BUDGET_SECONDS = 300.0
# What died_in_steps would name, for a script with no call (never run here: such a crash is left as found).
WHERE = "the case's own steps (the call under the sweep's trace, the derivatives the case took)"
_LEAST = re.compile(re.escape(steps.LEAST) + r"(\d+) - (.+?): ")
_NOTE = "crashes"  # the kind of the run's note about crashes left unattributed
STEP = "attributing crashes"  # the stage's name on the progress bar


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What a crash's ladder said."""

    status: str  # "kept" (the op's, or unattributed) or "internal" (torchsleuth's own)
    setup: str = ""  # the least setup that crashes, "step 9: forward-mode AD ..."; "" when none did
    reason: str
    timed_out: bool = False  # the script was stopped, still running


def attribute(config: SweepConfig, store, run_id: int, groups, findings: list[Finding], *, step=None,
              budget: float = BUDGET_SECONDS) -> None:
    """Run each crash group's ladder that has none yet (see the design note); store what it says.

    ``groups`` are report.groups' records of ``findings`` (the run's, flaky ones left out); ``step(name, done,
    total)`` hears of each group attributed.
    """
    shrunk = store.shrunk(run_id)
    by_id = {f.id: f for f in findings}
    todo: list[tuple[str, list[Finding]]] = []
    for g in groups:
        members = [by_id[i] for i in g.findings if i in by_id and by_id[i].kind == "crash"]
        if members and not any(_attributed(shrunk.get(f.id)) for f in members) and ladder_of(members[0]) is not None:
            todo.append((g.id, members))
    if not todo:
        return
    end = finish(config)  # a run with a time target: its ladders end with it (run.deadline)
    if end:
        budget = max(0.0, min(budget, end - time.time()))
    deadline = time.monotonic() + budget
    left: list[str] = []
    unclear: list[str] = []

    def one(item):
        seconds = min(LADDER_SECONDS, deadline - time.monotonic())
        verdict = run_ladder(item[1][0], config.imports, seconds) if seconds > 0 else None
        # stopped by the run's budget, not by its own limit: unattributed for lack of time, as one never begun
        return item, None if verdict is not None and verdict.timed_out and seconds < LADDER_SECONDS else verdict

    if step is not None:
        step(STEP, 0, len(todo))
    with ThreadPoolExecutor(max_workers=max(1, min(config.workers, len(todo)))) as threads:
        for done, ((gid, members), verdict) in enumerate(threads.map(one, todo), 1):
            if verdict is None:
                left.append(gid)
                continue
            first = members[0]
            for f in members:
                on = "" if f.id == first.id else f" (the ladder of {first.id}, the first of its group)"
                before = shrunk.get(f.id) or Shrunk(finding=f.id, status="kept", case_id=f.case_id)
                store.add_shrunk(run_id, dataclasses.replace(before, status=verdict.status, setup=verdict.setup, reason=verdict.reason + on))
            if verdict.setup:
                store.add_diagnosis(run_id, Diagnosis(group=gid, finding=first.id, case_id=first.case_id, sentence=sentence(first, verdict.setup)))
            elif verdict.status == "kept":
                unclear.append(f"{gid} ({verdict.reason})")
            if step is not None:
                step(STEP, done, len(todo))
    if left:
        store.note(run_id, _NOTE, f"{len(left)} crash group{'s' if len(left) != 1 else ''} left unattributed, kept as crashes of "
                                  f"their ops: the {budget:.0f} s the run gives crash ladders{' (what its time target left)' if end else ''} ran out "
                                  f"({', '.join(left)})")
    if unclear:
        store.note(run_id, _NOTE, f"unattributed, kept as crashes of their ops: {'; '.join(unclear)}")


def ladder_of(finding: Finding) -> tuple[str, ...] | None:
    """The derivatives ``finding``'s ladder takes; None when it has no ladder (another oracle's calls, no call recorded)."""
    return steps.derivatives(finding) if parts.writable_call(finding) is not None else None


def run_ladder(finding: Finding, imports: tuple[str, ...], seconds: float) -> Verdict:
    """``finding``'s ladder script run standalone, in a process (and process group) of its own, for at most ``seconds``."""
    text = steps.script(finding, torch.__version__, WHERE, imports)
    with tempfile.TemporaryDirectory(prefix="torchsleuth-ladder-") as folder:
        path = Path(folder) / f"{finding.id}.py"
        path.write_text(text, encoding="utf-8")
        child = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=_environ(), start_new_session=True)
        try:
            out, err = child.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)  # the script and the step it was waiting on
            child.communicate()
            return Verdict(status="kept", reason=f"its ladder script was still running after {seconds:.0f} s", timed_out=True)
    return verdict(child.returncode, out, err)


def verdict(status: int, out: str, err: str) -> Verdict:
    """What a ladder script's exit status and output say (scripts.steps: 1 with the step, 0 when none crashes)."""
    found = _LEAST.search(out)
    if status == 1 and found:
        setup = f"step {found[1]}: {found[2]}"
        return Verdict(status="kept", setup=setup, reason=f"a standalone script crashes at {setup}")
    if status == 0:
        return Verdict(status="internal", reason="no step of its standalone script crashes (the call, the derivatives the case took, "
                                                 "each under a dispatch mode too)")
    if status == 1:  # a step hangs: not the crash seen
        last = out.strip().splitlines()[-1] if out.strip() else ""
        return Verdict(status="kept", reason=f"its ladder script hangs instead ({parts.one_line(last)[:200]})")
    last = (err or out).strip().splitlines()[-1] if (err or out).strip() else ""
    return Verdict(status="kept", reason=f"its ladder script could not tell (exit status {status}: {parts.one_line(last)[:200]})")


def sentence(finding: Finding, setup: str) -> str:
    """The diagnosis of a crash group its ladder reproduced (``finding``: the one whose script ran)."""
    name = f"{finding.name}{VARIANT_WORDS.get(finding.variant, f' ({finding.variant})')}"
    if steps.CAUGHT in setup:  # scripts.steps' guarded step: a write outside a storage, the heap corruption that killed the worker
        return f"{name} corrupts the heap: at {setup.replace(': ', ' of the repro script of ' + finding.id + ' (' + finding.dtype + '), ', 1)}"
    return f"{name} crashes standalone: the repro script of {finding.id} ({finding.dtype}) dies at {setup} (the least setup of its ladder that crashes)"


def _attributed(shrunk: Shrunk | None) -> bool:
    return shrunk is not None and (shrunk.status == "internal" or bool(shrunk.setup))


def _environ() -> dict[str, str]:
    """The environment the script runs in: this one, with this process's module path, so that the run's ``--import``
    modules are found by name as the sweep found them."""
    paths = [p or os.getcwd() for p in sys.path]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)))
