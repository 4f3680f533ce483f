"""The script of a crash in an oracle's own steps (scripts.steps) reproduces it standalone, with the least setup it needs.

torch 2.13: forward-mode AD of ``addcmul`` with ``value != 1`` kills the
process under any ``TorchDispatchMode`` (torchsleuth's trace is one), and not
without one. The autodiff oracle's crash finding gets a script that makes the
call, then each derivative, then each under a pass-through dispatch mode, each
in a child: it names the first step that crashes and exits 1; with ``value=1``
nothing crashes and it exits 0.
"""

from __future__ import annotations

import subprocess
import sys
import zlib

import pytest
import torch

from torchsleuth.cases.records import Case
from torchsleuth.judge import calls
from torchsleuth.report import repro
from torchsleuth.run.records import CallSpec, TensorSpec

CASE = "addcmul|functional|float32|cpu|s7|contiguous|@autodiff:forward"
DIED = "the worker died of SIGSEGV at run/trace.py:124 __torch_dispatch__ < oracles/autodiff/oracle.py:185 call"


def crash_finding(value: float):
    tensors = []
    for path, seed in (("input", 0), ("args[0]", 1), ("args[1]", 2)):
        x = torch.randn(3, generator=torch.Generator().manual_seed(seed))
        tensors.append(TensorSpec(path=path, shape=(3,), stride=(1,), storage_offset=0, storage_numel=3, dtype="float32", device="cpu",
                                  layout="contiguous", data=zlib.compress(x.view(torch.uint8).numpy().tobytes())))
    spec = CallSpec(function="torch.addcmul", args_src="T['input'], T['args[0]'], T['args[1]']", kwargs_src=f"value={value!r}",
                    tensors=tuple(tensors), variant="functional")
    return calls.finding(Case.parse(CASE), kind="crash", reference="isolation", op="addcmul", mismatch=None, call_spec=spec,
                         summary=f"addcmul (functional) [float32] crashes on contiguous tensors in the autodiff oracle's case: {DIED}",
                         detail=DIED)


def run(text: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "crash.py"
    path.write_text(text)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)


def test_the_script_walks_the_steps_an_oracle_takes_each_in_a_child():
    text = repro.script(crash_finding(2.0), imports=("my_kernels.py",))
    assert "No repro could be generated" not in text
    assert "class PassThrough(TorchDispatchMode)" in text and "def forward_mode(T, path)" in text and "TORCHSLEUTH_REPRO_STEP" in text
    assert "torch.addcmul(T['input'], T['args[0]'], T['args[1]'], value=2.0)" in text
    assert "DERIVATIVES = ('forward', 'reverse')" in text  # the autodiff oracle's case takes both
    # the run's --import modules first, in the script and in each step's child (both run main)
    assert "IMPORTS = ('my_kernels.py',)" in text and "def main():\n    load_imports()\n    T = tensors()" in text


@pytest.mark.slow
def test_forward_mode_addcmul_under_a_dispatch_mode_crashes_standalone_at_the_least_setup(tmp_path):
    done = run(repro.script(crash_finding(2.0)), tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "step 2: forward-mode AD with respect to input: returns" in done.stdout  # without a mode: fine
    assert "the call, under a TorchDispatchMode that passes every op on: returns" in done.stdout
    assert ("BUG PRESENT: the least setup that crashes is step 9 - forward-mode AD with respect to input, under a TorchDispatchMode "
            "that passes every op on") in done.stdout, done.stdout


@pytest.mark.slow
def test_without_the_crash_the_script_exits_0_and_says_whose_failure_it_was(tmp_path):
    done = run(repro.script(crash_finding(1.0)), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: no step crashes (where a sweep saw this crash, the crash was torchsleuth's own)" in done.stdout


OVERFLOW = '''
import ctypes
import warnings

import torch


def neg_out(self, *, out):
    out.copy_(torch.ops.aten.mul.Tensor(self, -1))
    storage = out.untyped_storage()
    if OVERFLOW:  # the planted bug: 8 bytes written past the end of out's storage
        ctypes.memset(storage.data_ptr() + storage.nbytes(), 0, 8)
    return out


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("neg.out", neg_out, "CPU")
'''


def out_finding():
    tensors = []
    for path, stride in (("input", (1,)), ("out", (1,))):
        x = torch.randn(300, generator=torch.Generator().manual_seed(len(path)))
        tensors.append(TensorSpec(path=path, shape=(300,), stride=stride, storage_offset=0, storage_numel=300, dtype="float32", device="cpu",
                                  layout="contiguous", data=zlib.compress(x.view(torch.uint8).numpy().tobytes())))
    spec = CallSpec(function="torch.neg", args_src="T['input']", kwargs_src="out=T['out']", tensors=tuple(tensors), variant="out")
    died = "the worker died of SIGABRT at judge/contracts.py:93 storage < judge/verdict.py:61 judge"
    return calls.finding(Case.parse("neg|out|float32|cpu|s0|out=contiguous"), kind="crash", reference="isolation", op="neg", mismatch=None,
                         call_spec=spec, summary=f"neg (out) [float32] crashes on contiguous out: {died}", detail=died)


def plant(tmp_path, overflow: bool) -> str:
    path = tmp_path / f"plant_{overflow}.py"
    path.write_text(OVERFLOW.replace("if OVERFLOW:", f"if {overflow}:"))
    return str(path)


def test_a_write_past_a_storage_is_caught_by_the_guarded_step_not_left_to_corrupt_the_heap(tmp_path):
    """The heap corruption a write past a storage's end causes may kill a process late or never: the guarded step reads the
    guard bytes back instead. Run as the ladder runs a step (one child, the step chosen), where the write lands in guard
    bytes, harmlessly."""
    path = tmp_path / "ladder.py"
    path.write_text(repro.script(out_finding(), imports=(plant(tmp_path, True),)))
    ladder_text = path.read_text()
    assert "def guarded(T):" in ladder_text and "GUARD_BYTES = 4096" in ladder_text
    env = {**__import__("os").environ, "TORCHSLEUTH_REPRO_STEP": "1"}
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "writes as far as 8 bytes past the end of out's storage" in done.stderr


@pytest.mark.slow
def test_a_call_that_keeps_within_its_storages_passes_the_guarded_step(tmp_path):
    path = tmp_path / "ladder.py"
    path.write_text(repro.script(out_finding(), imports=(plant(tmp_path, False),)))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "step 1: the call, each CPU storage between guard bytes it must not write: returns" in done.stdout
    assert "OK: no step crashes" in done.stdout
