"""The device rule's arbitration (judge.verdict.device, judge.arbiter): where a device and the CPU disagree on a function
the exact reference knows, the exact value says whose error it is.

The case is one an H100's run reported against CUDA (bench/compiled-cuda.md): float64 ``sinh`` past exp's overflow
threshold, where the CPU's vector path gives inf and CUDA the right 1.2755e308. This machine has no GPU, so the device
is simulated: the rule is run as if the case were on cuda, and the plant is the CPU's early overflow wherever
torchsleuth's references run (a frame ``_run``), the call under test right. Its twin plants the device wrong."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
import torch

from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case
from torchsleuth.judge import arbiter, verdict

CASE = "sinh|functional|float64|cpu|s0|contiguous|dim:input@1>19;special:input=overflow"
# its gradient, grad * cosh(x), at the numbers next to sinh's own threshold: the CPU's cosh overflows early alike
BACKWARD = "sinh|backward|float64|cpu|s0|contiguous|dim:input@1>19;edge:input=overflow"
EXP_OVERFLOWS = 709.782712893384  # exp(x) is past float64's largest value from here on


def _in_references() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "_run":
            return True
        frame = frame.f_back
    return False


def _libm(x: torch.Tensor, function=np.sinh) -> torch.Tensor:
    return torch.from_numpy(function(x.detach().cpu().numpy())).to(x.dtype)


def cpu_overflows_early(x, function=np.sinh):
    """The references' sinh overflows where exp does (the CPU's vector path); the call under test is libm's."""
    right = _libm(x, function)
    if not _in_references():
        return right
    sign = x if function is np.sinh else torch.ones_like(x)
    return torch.where(x.abs() > EXP_OVERFLOWS, torch.copysign(torch.full_like(right, float("inf")), sign), right)


def device_off_by_a_percent(x):
    """The references' sinh is libm's; the call under test is 1% off (a device kernel's error)."""
    right = _libm(x)
    return right if _in_references() else right * 1.01


@pytest.fixture
def on_a_device(monkeypatch):
    """The device rule applied as if the case ran on cuda (the rule skips a CPU case)."""
    real = verdict.device

    def as_if_on_cuda(ctx):
        ctx.case = dataclasses.replace(ctx.case, device="cuda")
        real(ctx)

    monkeypatch.setattr(verdict, "device", as_if_on_cuda)


def device_findings(outcome) -> list:
    return [f for f in outcome.findings if f.reference == "device"]


def test_the_cpus_early_overflow_is_not_the_devices_finding_and_the_note_says_whose(plant, on_a_device):
    plant("sinh", cpu_overflows_early)
    outcome = run_case(Case.parse(CASE))
    assert not device_findings(outcome), [f.summary for f in device_findings(outcome)]
    assert "out: the CPU is wrong at" in outcome.reason and "agrees with cuda" in outcome.reason and "not cuda's" in outcome.reason


def test_without_arbitration_the_same_case_blames_the_device(plant, on_a_device, monkeypatch):
    plant("sinh", cpu_overflows_early)
    monkeypatch.setattr(arbiter, "MOST", 0)
    [found] = device_findings(run_case(Case.parse(CASE)))
    assert found.op == "aten.sinh.default" and "on cuda differs from the CPU" in found.summary


def test_a_device_kernel_off_by_a_percent_is_still_the_devices_finding(plant, on_a_device):
    plant("sinh", device_off_by_a_percent)
    [found] = device_findings(run_case(Case.parse(CASE)))
    assert found.op == "aten.sinh.default" and found.kind == "mismatch" and found.dtype == "float64"


def test_the_plants_absent_the_case_is_clean(on_a_device):
    assert not device_findings(run_case(Case.parse(CASE)))


def test_the_cpus_early_overflow_in_a_gradient_is_not_the_devices_finding(plant, on_a_device):
    plant("cosh", lambda x: cpu_overflows_early(x, np.cosh))  # sinh's backward is grad * cosh(x)
    outcome = run_case(Case.parse(BACKWARD))
    assert not device_findings(outcome), [f.summary for f in device_findings(outcome)]
    assert "grad[input]: the CPU is wrong at" in outcome.reason and "agrees with cuda" in outcome.reason


def test_without_arbitration_the_gradient_blames_the_device(plant, on_a_device, monkeypatch):
    plant("cosh", lambda x: cpu_overflows_early(x, np.cosh))
    monkeypatch.setattr(arbiter, "MOST", 0)
    [found] = device_findings(run_case(Case.parse(BACKWARD)))
    assert found.kind == "gradient_mismatch" and found.mismatch.path == "grad[input]"
