"""Where the float64 references are made (run.references.wide_device): on the CPU, but off it, for a call over
``WIDE_ON_DEVICE`` elements, on the device under test: a span probe's float64 runs over 2^24 entries took seconds each
on the CPU (bench/cuda-pointed.md); the CPU's call in the case's dtype stays the device reference.

The meta device stands in for a GPU (its tensors hold no data, so a call of 2^23 elements costs nothing); the CUDA test
runs on a GPU only.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from torchsleuth.cases import opinfo
from torchsleuth.cases.records import Case
from torchsleuth.run import call
from torchsleuth.run import references as refs_module
from torchsleuth.run.references import References


def references(device: str, elements: int) -> References:
    case = Case(op="cumsum", variant="functional", dtype="float32", device=device, sample=0)
    entry = opinfo.get("cumsum")
    sample = dataclasses.replace(opinfo.samples(entry, torch.float32)[0], input=torch.zeros(elements, device=device), args=(0,))
    return References(call.prepare(case, opinfo.functions(entry)["functional"], sample), torch.float32, seed=0)


def test_the_float64_runs_are_on_the_cpu_unless_a_large_call_is_off_it():
    big = refs_module.WIDE_ON_DEVICE + 1
    assert references("cpu", big).wide_device == "cpu"  # a CPU sweep: float64 on the CPU, whatever the size
    assert references("meta", 1000).wide_device == "cpu"  # a small call off the CPU: float64 on the CPU as always
    assert references("meta", big).wide_device == "meta"  # a large one: on the device under test


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA, where a copy to it fails")
def test_where_the_device_cannot_make_the_float64_run_the_cpu_makes_it_and_the_nudged_runs_follow():
    refs = references("cpu", 1000)
    refs.wide_device = "cuda"  # as if the call were large and off the CPU, on a device that fails the float64 run
    assert refs.float64.ok and refs.float64.value.device.type == "cpu" and refs.wide_device == "cpu"
    assert len(refs.perturbed) == 2 and all(r.value.device.type == "cpu" for r in refs.perturbed)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_large_call_s_float64_and_nudged_runs_are_made_on_the_gpu_and_the_cpu_reference_stays_on_the_cpu():
    refs = references("cuda", refs_module.WIDE_ON_DEVICE + 3)
    assert refs.float64.ok and refs.float64.value.device.type == "cuda" and refs.float64.value.dtype == torch.float64
    assert all(r.value.device.type == "cuda" for r in refs.perturbed) and len(refs.perturbed) == 2
    assert refs.cpu.ok and refs.cpu.value.device.type == "cpu"
