"""Repro scripts: for each planted bug class, the script fails with the plant and passes without.

Each test plants a bug in an aten CPU kernel with ``torch.library`` (scoped:
destroyed before the test ends), runs the engine on one op to get a real
finding, and writes that finding's script. The script is then run twice in
fresh interpreters: as written, on a clean torch (the bug is absent: exit 0),
and with the same planting code prepended (the bug is present: exit 1).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import math
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

from torchsleuth.cases.records import Unit
from torchsleuth.config import SweepConfig
from torchsleuth.engine import run_unit
from torchsleuth.judge.records import Finding
from torchsleuth.report import repro

# Defines ``_lib`` and ``_plant``; each plant below registers one kernel with it.
PLANT_HEAD = '''
import os
import signal
import warnings

import torch

_lib = torch.library.Library("aten", "IMPL")


def _plant(name, kernel):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        _lib.impl(name, kernel, "CPU")
'''

DROPPED_WRITE = '''
def _addcmul_(self, tensor1, tensor2, *, value=1):
    if not self.is_contiguous():
        return self  # the bug: the write is dropped
    return self.copy_(self + tensor1 * tensor2 * value)
_plant("addcmul_", _addcmul_)
'''

# name: (OpInfo op, variants swept, the finding's kind, its reference, the plant)
PLANTS = {
    "dropped_write": ("addcmul", ("inplace",), "dropped_write", "layout", DROPPED_WRITE),
    "layout_mismatch": ("addcmul", ("functional",), "mismatch", "layout", '''
def _addcmul(self, tensor1, tensor2, *, value=1):
    result = self + tensor1 * tensor2 * value
    return result if self.is_contiguous() else result + 1
_plant("addcmul", _addcmul)
'''),
    "precision": ("addcmul", ("functional",), "mismatch", "precision", '''
def _addcmul(self, tensor1, tensor2, *, value=1):
    result = self + tensor1 * tensor2 * value
    # float32 rounded through bfloat16; float64 (the reference) untouched
    return result.to(torch.bfloat16).to(result.dtype) if result.dtype == torch.float32 else result
_plant("addcmul", _addcmul)
'''),
    "out_unwritten": ("addcmul", ("out",), "out_ignored", "layout", '''
def _addcmul_out(self, tensor1, tensor2, *, value=1, out):
    if out.is_contiguous():
        out.copy_(self + tensor1 * tensor2 * value)
    return out
_plant("addcmul.out", _addcmul_out)
'''),
    "out_restrided": ("addcmul", ("out",), "out_ignored", "contract", '''
def _addcmul_out(self, tensor1, tensor2, *, value=1, out):
    result = self + tensor1 * tensor2 * value
    if out.is_contiguous():
        return out.copy_(result)
    return out.set_(result.untyped_storage(), 0, result.shape, result.stride())
_plant("addcmul.out", _addcmul_out)
'''),
    "gradient": ("tanh", ("backward",), "gradient_mismatch", "layout", '''
def _tanh_backward(grad_output, output):
    result = grad_output * (1 - output * output)
    return result if grad_output.is_contiguous() else result * 2
_plant("tanh_backward", _tanh_backward)
'''),
    "out_of_view_write": ("addcmul", ("inplace",), "out_of_view_write", "contract", '''
def _addcmul_(self, tensor1, tensor2, *, value=1):
    self.copy_(self + tensor1 * tensor2 * value)
    if not self.is_contiguous():  # the bug: the element after the view is overwritten
        end = self.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(self.shape, self.stride()))
        self.as_strided((1,), (1,), end).fill_(0)
    return self
_plant("addcmul_", _addcmul_)
'''),
    "input_mutated": ("addcmul", ("functional",), "input_mutated", "contract", '''
def _addcmul(self, tensor1, tensor2, *, value=1):
    result = self + tensor1 * tensor2 * value
    if not tensor1.is_contiguous():
        tensor1.mul_(2)  # the bug: an input is written
    return result
_plant("addcmul", _addcmul)
'''),
    "random_coverage": ("bernoulli_", ("inplace",), "random_coverage", "contract", '''
def _bernoulli_(self, p=0.5, *, generator=None):
    if self.is_contiguous():
        self.copy_(torch.rand(self.shape, generator=generator) < p)
    return self
_plant("bernoulli_.float", _bernoulli_)
'''),
    "random_support": ("bernoulli_", ("inplace",), "random_coverage", "contract", '''
def _bernoulli_(self, p=0.5, *, generator=None):
    return self.copy_(torch.rand(self.shape, generator=generator) < p).mul_(2)
_plant("bernoulli_.float", _bernoulli_)
'''),
    "nondeterministic": ("addcmul", ("functional",), "nondeterministic", "determinism", '''
_calls = [0]
def _addcmul(self, tensor1, tensor2, *, value=1):
    _calls[0] += 1
    return self + tensor1 * tensor2 * value + _calls[0] * 1e-3
_plant("addcmul", _addcmul)
'''),
}

CRASH = '''
def _addcmul_(self, tensor1, tensor2, *, value=1):
    if not self.is_contiguous():
        os.kill(os.getpid(), signal.SIGKILL)  # the bug: the process dies
    return self.copy_(self + tensor1 * tensor2 * value)
_plant("addcmul_", _addcmul_)
'''

# What a repro script may import: torch and the standard library.
ALLOWED_IMPORTS = {"base64", "os", "subprocess", "sys", "traceback", "zlib", "torch"}


@contextlib.contextmanager
def planted(plant: str):
    namespace: dict = {}
    exec(PLANT_HEAD + plant, namespace)
    try:
        yield
    finally:
        namespace["_lib"]._destroy()


def findings_with(plant: str, op: str, variants: tuple[str, ...]) -> list[Finding]:
    config = SweepConfig(ops=(op,), variants=variants, samples=1, layouts=("contiguous", "transposed", "strided"))
    with planted(plant):
        events = list(run_unit(Unit(op=op, dtype="float32", device="cpu"), config))
    return [f for kind, outcome in events if kind == "outcome" for f in outcome.findings]


def finding_for(name: str) -> tuple[Finding, str]:
    op, variants, kind, reference, plant = PLANTS[name]
    found = [f for f in findings_with(plant, op, variants) if f.kind == kind and f.reference == reference]
    if name == "random_support":  # impossible values, not undrawn elements: no mismatch to point at
        found = [f for f in found if f.mismatch is None]
    assert found, f"the planted {name} bug was not found"
    return found[0], plant


def run_scripts(tmp_path: Path, **texts: str) -> dict[str, subprocess.CompletedProcess]:
    """Runs each script in its own fresh interpreter, all at once."""
    running = {}
    for name, text in texts.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        running[name] = subprocess.Popen([sys.executable, str(path)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=120)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return done


def output(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def imports_of(text: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
    return found


def namespace_of(text: str) -> dict:
    """The script's functions and constants, without running ``main``."""
    namespace = {"__name__": "repro"}
    exec(compile(text, "repro.py", "exec"), namespace)
    return namespace


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PLANTS))
def test_script_fails_with_the_bug_and_passes_without(name, tmp_path):
    finding, plant = finding_for(name)
    text = repro.script(finding)
    assert imports_of(text) <= ALLOWED_IMPORTS
    runs = run_scripts(tmp_path, clean=text, buggy=PLANT_HEAD + plant + text)
    assert runs["clean"].returncode == 0, output(runs["clean"])
    assert "OK:" in runs["clean"].stdout
    assert runs["buggy"].returncode == 1, output(runs["buggy"])
    assert "BUG PRESENT: " + " ".join(finding.summary.split()) in runs["buggy"].stdout


def test_a_support_script_run_in_this_process_finds_the_impossible_draws_with_the_plant_and_none_without(capsys):
    """A support check's script (scripts.support), which the slow tier runs in fresh interpreters, run here: its main
    is 1 while the planted bernoulli_ draws twos, 0 on the real kernel."""
    finding, plant = finding_for("random_support")
    main = namespace_of(repro.script(finding))["main"]
    assert main() == 0, capsys.readouterr().out
    with planted(plant):
        assert main() == 1
    out = capsys.readouterr().out
    assert "BUG PRESENT: " + " ".join(finding.summary.split()) in out and " draw(s) impossible; min 0.0, max 2.0" in out, out


def test_header_says_what_was_found_and_how_to_run_it():
    finding, _ = finding_for("dropped_write")
    text = repro.script(finding, torch_version="9.9.9-test")
    header = text[: text.index("\nimport ")]
    for needed in (finding.id, finding.op, finding.kind, finding.summary, "torch 9.9.9-test", f"python {finding.id}.py", "Exit status"):
        assert needed in header
    # the call is written out literally, from the CallSpec
    assert f"return {finding.call.function}({finding.call.args_src}" in text


def test_tensors_are_rebuilt_exactly():
    finding, _ = finding_for("dropped_write")
    assert any(spec.layout != "contiguous" for spec in finding.call.tensors)
    rebuilt = namespace_of(repro.script(finding))["tensors"]()
    assert set(rebuilt) == {spec.path for spec in finding.call.tensors}
    for spec in finding.call.tensors:
        t = rebuilt[spec.path]
        assert (tuple(t.shape), t.stride(), t.storage_offset()) == (spec.shape, spec.stride, spec.storage_offset)
        assert str(t.dtype) == f"torch.{spec.dtype}" and str(t.device) == spec.device
        assert t.requires_grad == spec.requires_grad
        storage = t.untyped_storage()
        assert storage.nbytes() == spec.storage_numel * t.element_size()
        # the whole storage comes back, the poisoned gaps and guards included
        assert bytes(storage) == zlib.decompress(spec.data)


def test_gradient_script_marks_the_differentiated_inputs():
    finding, _ = finding_for("gradient")
    rebuilt = namespace_of(repro.script(finding))["tensors"]()
    assert finding.call.grad_paths
    for path in finding.call.grad_paths:
        assert rebuilt[path].requires_grad
    assert not any(t.requires_grad for p, t in rebuilt.items() if p.startswith("grad_output"))


def test_comparison_follows_the_tolerance_rule():
    finding, _ = finding_for("dropped_write")
    agree = namespace_of(repro.script(finding))["agree"]  # ATOL 1e-05, RTOL 1.3e-06

    def same(a, e, **how):
        return agree("out", a, e, values=True, bitwise=False, cast=False, **how)

    nan, inf = float("nan"), float("inf")
    assert same(torch.tensor([nan, inf, -inf, 1.0]), torch.tensor([nan, inf, -inf, 1.0]))
    assert not same(torch.tensor([inf]), torch.tensor([-inf]))
    assert not same(torch.tensor([1.0]), torch.tensor([inf]))  # an infinity allows nothing else
    assert not same(torch.tensor([nan]), torch.tensor([1.0]))
    assert not same(torch.tensor([1.0]), torch.tensor([nan]))
    assert same(torch.tensor([100.0 + 1e-4]), torch.tensor([100.0]))  # within 1e-5 + 1.3e-6 * 100
    assert not same(torch.tensor([100.0 + 2e-3]), torch.tensor([100.0]))
    assert not same(torch.tensor([1, 2]), torch.tensor([1, 3]))  # integers: exact
    assert same(torch.tensor([True, False]), torch.tensor([True, False]))
    assert not same(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0], dtype=torch.float64))  # dtype first
    assert not same(torch.tensor([1.0, 2.0]), torch.tensor([[1.0, 2.0]]))  # shape first


@pytest.mark.slow
def test_storage_too_large_to_inline_is_seeded_and_says_so(tmp_path):
    finding, plant = finding_for("dropped_write")
    specs = tuple(dataclasses.replace(spec, data=None) for spec in finding.call.tensors)
    text = repro.script(dataclasses.replace(finding, call=dataclasses.replace(finding.call, tensors=specs)))
    assert "DATA" not in text and "seeded values stand in" in text
    runs = run_scripts(tmp_path, clean=text, buggy=PLANT_HEAD + plant + text)
    assert runs["clean"].returncode == 0, output(runs["clean"])
    assert runs["buggy"].returncode == 1, output(runs["buggy"])


@pytest.mark.slow
def test_crash_script_runs_the_call_in_a_child_then_under_a_dispatch_mode(tmp_path):
    dropped, _ = finding_for("dropped_write")
    crash = dataclasses.replace(dropped, kind="crash", reference="isolation", mismatch=None, summary="addcmul_ kills the process")
    text = repro.script(crash)
    assert "DERIVATIVES = ()" in text  # an in-place case takes no derivatives: the call, then the call under the trace's mode
    runs = run_scripts(tmp_path, clean=text, buggy=PLANT_HEAD + CRASH + text)
    assert runs["clean"].returncode == 0, output(runs["clean"])
    assert "step 2: the call, under a TorchDispatchMode that passes every op on: returns" in runs["clean"].stdout, output(runs["clean"])
    assert runs["buggy"].returncode == 1, output(runs["buggy"])
    assert "BUG PRESENT: the least setup that crashes is step 0 - the call: addcmul_ kills the process" in runs["buggy"].stdout


def test_without_a_recorded_call_the_script_explains_and_exits_2(tmp_path):
    dropped, _ = finding_for("dropped_write")
    no_call = dataclasses.replace(dropped, kind="crash", reference="isolation", mismatch=None, call=None)
    unnamed = dataclasses.replace(dropped, call=dataclasses.replace(dropped.call, function="", why_not="the op has no public name to call it by"))
    runs = run_scripts(tmp_path, no_call=repro.script(no_call), unnamed=repro.script(unnamed))
    assert runs["no_call"].returncode == 2 and "was not recorded" in runs["no_call"].stderr
    assert runs["unnamed"].returncode == 2 and "no public name" in runs["unnamed"].stderr
    assert dropped.id in repro.script(no_call)


def test_a_call_that_now_raises_cannot_be_checked(tmp_path):
    dropped, _ = finding_for("dropped_write")
    raising = dataclasses.replace(dropped, call=dataclasses.replace(dropped.call, args_src=dropped.call.args_src + ", 'not a tensor'"))
    runs = run_scripts(tmp_path, raising=repro.script(raising))
    assert runs["raising"].returncode == 2, output(runs["raising"])
    assert "CANNOT CHECK" in runs["raising"].stdout


def test_write_scripts_writes_one_file_per_finding(tmp_path):
    op, variants, _, _, plant = PLANTS["dropped_write"]
    findings = findings_with(plant, op, variants)
    assert len({f.id for f in findings}) >= 2
    paths = repro.write_scripts(findings + findings[:1], tmp_path)
    assert set(paths) == {f.id for f in findings}
    for finding in findings:
        path = paths[finding.id]
        assert path == tmp_path / "repros" / f"{finding.id}.py"
        assert path.read_text() == repro.script(finding)


def test_references_move_dtype_and_device_arguments(tmp_path):
    finding, _ = finding_for("precision")
    call = dataclasses.replace(finding.call, function="torch.full_like", args_src="T['input'], 0.1", kwargs_src="dtype=torch.float32, device='cpu'")
    precise = repro.script(dataclasses.replace(finding, call=call))
    assert "return torch.full_like(T['input'], 0.1, dtype=torch.float32, device='cpu')" in precise
    assert "return torch.full_like(T['input'], 0.1, dtype=torch.float64, device='cpu')" in precise
    # 0.1 in float32 is float64's 0.1 rounded: the precision check passes
    runs = run_scripts(tmp_path, precise=precise)
    assert runs["precise"].returncode == 0, output(runs["precise"])
    on_device = dataclasses.replace(call, kwargs_src="dtype=torch.float32, device=torch.device('cuda:0')")
    across = repro.script(dataclasses.replace(finding, reference="device", device="cuda:0", call=on_device))
    assert "return torch.full_like(T['input'], 0.1, dtype=torch.float32, device=torch.device('cuda:0'))" in across
    assert "return torch.full_like(T['input'], 0.1, dtype=torch.float32, device='cpu')" in across
    assert "copies(tensors(), device='cpu')" in across


def test_script_constants_are_the_engines():
    from torchsleuth.run import call

    finding, _ = finding_for("random_coverage")
    namespace = namespace_of(repro.script(finding))
    assert namespace["CALL_SEED"] == call.CALL_SEED
    # the prefills a coverage script writes are the ones the engine's two runs use
    fills, engine_fills = namespace["FILLS"], call.prefills(getattr(torch, finding.dtype))
    assert len(fills) == len(engine_fills) == 2
    assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(fills, engine_fills))
