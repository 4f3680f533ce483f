"""Whose crash it is (shrink.attribute): a crash counts against the op only where a standalone script reproduces it.

Two plants in one file the sweep imports, as a user's ``--import`` file: ``neg``
kills its process whenever forward-mode AD is on (a dual level is open), which
the autodiff oracle's cases do and so does the forward-mode step of the crash's
script; ``abs`` kills its process on a transposed input only inside
torchsleuth's own worker (``torchsleuth.engine`` imported), which no standalone
script is. The first is a crash of ``neg`` at the least setup its script finds;
the second is torchsleuth's own failure, listed apart and out of the exit status.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib

import pytest
import torch

from torchsleuth import SweepConfig
from torchsleuth.cases.records import Case
from torchsleuth.judge.isolation import isolation_outcome
from torchsleuth.report import groups as grouping
from torchsleuth.run.records import CallSpec, TensorSpec
from torchsleuth.shrink import attribute
from torchsleuth.shrink.records import Shrunk
from torchsleuth.store.sqlite import Store

PLANT = '''
import os
import sys
import warnings

import torch
import torch.autograd.forward_ad as fw


def neg(self):
    if fw._current_level >= 0:  # a dual level is open: forward-mode AD is on
        os.abort()
    return self * -1


def abs(self):
    if "torchsleuth.engine" in sys.modules and self.dim() == 2 and self.stride(0) < self.stride(1):
        os.abort()  # only in torchsleuth's worker: no standalone script has torchsleuth loaded
    return torch.where(self < 0, -self, self)


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("neg", neg, "CPU")
    library.impl("abs", abs, "CPU")
'''

FORWARD_MODE = "step 2: forward-mode AD with respect to input"


def sweep(tmp_path, op: str, oracles: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``torchsleuth ops --ops OP`` with the plants imported, kept small: float32, one sample, no search."""
    plant = tmp_path / "plant.py"
    plant.write_text(PLANT)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "torchsleuth.cli.main", "ops", "--ops", op, "--dtypes", "float32", "--variants", "functional",
                           "--layouts", "contiguous,transposed", "--search", "none", "--samples", "1", "--workers", "1", "--oracles", oracles,
                           "--import", str(plant), "--out", str(out), "--json", str(out / "findings.json"), "--no-progress"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    return done, json.loads((out / "findings.json").read_text())


@pytest.mark.slow
def test_a_crash_its_standalone_script_reproduces_is_the_ops_and_names_the_least_setup(tmp_path):
    done, data = sweep(tmp_path, "neg", "autodiff")
    assert done.returncode == 1, done.stdout + done.stderr
    assert data["findings"] and data["internal_failures"] == [], data
    for f in data["findings"]:
        assert (f["kind"], f["op"], f["reference"]) == ("crash", "neg", "isolation") and "@autodiff:" in f["case_id"], f
        assert f["summary"].endswith(f"; a standalone script crashes at {FORWARD_MODE}"), f["summary"]
        header = (tmp_path / "out" / f["repro"]).read_text().split("\nimport ")[0]
        assert f"a standalone script crashes at {FORWARD_MODE}" in header, header
    for g in data["groups"]:
        assert g["diagnosis"].startswith("neg crashes standalone: the repro script of f-"), g
        assert f"dies at {FORWARD_MODE} (the least setup of its ladder that crashes)" in g["diagnosis"], g
    assert f"dies at {FORWARD_MODE}" in " ".join(done.stdout.split())


@pytest.mark.slow
def test_a_crash_only_torchsleuths_worker_sees_is_its_own_failure_not_the_ops(tmp_path):
    done, data = sweep(tmp_path, "abs", "none")
    assert done.returncode == 0, done.stdout + done.stderr  # no finding against abs
    assert data["findings"] == [] and data["groups"] == [], data
    [failure] = data["internal_failures"]
    assert (failure["op"], failure["kind"], failure["case_id"]) == ("abs", "crash", "abs|functional|float32|cpu|s0|input=transposed"), failure
    assert "torchsleuth's own failure: no step of its standalone script crashes" in failure["summary"], failure
    assert "SIGABRT" in failure["detail"], failure
    said = " ".join(done.stdout.split())
    assert "no findings" in said and f"torchsleuth's own failure, not the op's: {failure['id']}" in said, said


# --- the stage's bookkeeping, without running a script ---------------------------------------


def crash(case_id: str, *, call: bool = True):
    x = torch.randn(3, generator=torch.Generator().manual_seed(0))
    spec = CallSpec(function="torch.neg", args_src="T['input']", kwargs_src="", tensors=(TensorSpec(
        path="input", shape=(3,), stride=(1,), storage_offset=0, storage_numel=3, dtype="float32", device="cpu", layout="contiguous",
        data=zlib.compress(x.view(torch.uint8).numpy().tobytes())),), variant="functional")
    return isolation_outcome(Case.parse(case_id), "crash", "the worker died of SIGSEGV", spec if call else None)


def test_which_crashes_get_a_ladder_and_which_derivatives_it_takes():
    plain, backward = "neg|functional|float32|cpu|s0|contiguous", "neg|backward|float32|cpu|s0|contiguous"
    assert attribute.ladder_of(crash(plain).findings[0]) == ()  # the call, and the call under the trace's dispatch mode
    assert attribute.ladder_of(crash(backward).findings[0]) == ("reverse",)
    assert attribute.ladder_of(crash(plain + "|@autodiff:forward").findings[0]) == ("forward", "reverse")
    assert attribute.ladder_of(crash(plain + "|@vmap:forward").findings[0]) is None  # the vmap oracle's own calls: no ladder
    assert attribute.ladder_of(crash(plain, call=False).findings[0]) is None  # no call recorded


def test_what_a_ladder_script_says_decides_whose_crash_it_is():
    found = attribute.verdict(1, "step 0: the call: returns\nstep 2: forward-mode AD with respect to input: the process died (exit status -6)\n"
                                 "BUG PRESENT: the least setup that crashes is step 2 - forward-mode AD with respect to input: neg crashes\n", "")
    assert (found.status, found.setup) == ("kept", FORWARD_MODE)
    guard = "the call, each CPU storage between guard bytes it must not write"
    what = "the call writes as far as 12 bytes past the end of out's storage (caught between guard bytes; such a write corrupts the heap)"
    wrote = attribute.verdict(1, f"step 1: {guard}: the call writes as far as 12 bytes past the end of out's storage\n"
                                 f"BUG PRESENT: the least setup that crashes is step 1 - {what}: tril crashes\n", "")
    assert (wrote.status, wrote.setup) == ("kept", f"step 1: {what}")  # a write past a storage: the op's heap corruption
    own = attribute.verdict(0, "OK: no step crashes (where a sweep saw this crash, the crash was torchsleuth's own)\n", "")
    assert own.status == "internal" and not own.setup
    hang = attribute.verdict(1, "BUG PRESENT: the least setup that hangs is step 0 - the call: neg crashes\n", "")
    raised = attribute.verdict(2, "CANNOT CHECK: the call raised\n", "Traceback ...\nRuntimeError: no such op\n")
    assert (hang.status, hang.setup, raised.status, raised.setup) == ("kept", "", "kept", "")  # unattributed: kept as found
    assert "hangs instead" in hang.reason and "exit status 2: RuntimeError: no such op" in raised.reason


def test_a_crash_group_past_the_budget_is_left_a_crash_of_the_op_and_the_run_says_so(tmp_path):
    store = Store(tmp_path / "runs.db")
    config = SweepConfig(ops=("neg",), dtypes=("float32",), workers=1)
    run, _ = store.start(config, torch_version=torch.__version__, version="test")
    for case_id in ("neg|functional|float32|cpu|s0|contiguous", "neg|functional|float32|cpu|s1|contiguous"):
        store.add(run.id, crash(case_id))
    findings, groups = grouping.of_run(store, run.id)
    assert len(groups) == 1 and len(groups[0].findings) == 2  # one bug, one ladder
    attribute.attribute(config, store, run.id, groups, findings, budget=0)
    assert store.shrunk(run.id) == {} and store.diagnoses(run.id) == {}  # nothing attributed, nothing set aside
    assert [kind for kind, _ in store.notes(run.id)] == ["crashes"]
    assert f"1 crash group left unattributed, kept as crashes of their ops: the 0 s the run gives crash ladders ran out ({groups[0].id})" \
        in store.notes(run.id)[0][1]
    store.close()


def test_a_crash_as_reported_carries_what_its_script_said():
    finding = crash("neg|functional|float32|cpu|s0|contiguous").findings[0]
    kept = Shrunk(finding=finding.id, status="kept", case_id=finding.case_id, setup=FORWARD_MODE)
    own = Shrunk(finding=finding.id, status="internal", case_id=finding.case_id, reason="no step of its standalone script crashes")
    assert kept.reported(finding).summary == f"{finding.summary}; a standalone script crashes at {FORWARD_MODE}"
    assert own.reported(finding).summary == f"{finding.summary}; torchsleuth's own failure: no step of its standalone script crashes"
    assert grouping.split([finding], {finding.id: own}) == ([], [finding])  # set aside: no finding against the op
