"""A case's tensors laid out on the host and moved in one copy (run.transfer.placed) are the tensors laying them out
on the device made, and the host storages kept beside them are what the device holds.

The device half needs CUDA (run on the H200, bench/cuda-sweep.md); on the CPU it is skipped and the CPU half checks
that nothing changes there: a CPU case keeps no host storages and lays its tensors out as it always did.
"""

from __future__ import annotations

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases import layouts, opinfo
from torchsleuth.cases.records import Case
from torchsleuth.drill import kernels
from torchsleuth.run.references import base_case
from torchsleuth.run import call, transfer
from torchsleuth.run.references import References

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

DTYPES = (torch.float32, torch.bfloat16, torch.complex64, torch.int64, torch.bool)
SHAPES = ((2, 3, 4, 5), (3, 1, 4), (5,), (1, 4, 1, 3, 2), ())


def values(shape, dtype) -> torch.Tensor:
    return torch.arange(1, 1 + torch.Size(shape).numel()).reshape(shape).to(dtype)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit, NaN poison included (compared as bytes)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def layouts_of(shape) -> list[str]:
    t = torch.zeros(shape)
    return [layout.name for layout in layouts.ALL if layouts.applies(layout.name, t)]


def test_on_the_cpu_a_tensor_is_laid_out_where_it_is_and_no_host_storage_is_kept():
    for shape in SHAPES:
        for name in layouts_of(shape):
            t = values(shape, torch.float32)
            laid, host = transfer.placed(name, t, "cpu")
            expected = layouts.apply(name, t)
            assert host is None
            assert call.metadata(laid) == call.metadata(expected), (shape, name)
            assert same(transfer.storage_of(laid), transfer.storage_of(expected)), (shape, name)


def test_a_cpu_case_keeps_no_host_storages():
    case = Case(op="addcmul", variant="inplace", dtype="float32", device="cpu", sample=0, layouts=(("input", "transposed"),))
    entry = opinfo.get("addcmul")
    sample = opinfo.samples(entry, torch.float32)[0]
    prepared = call.prepare(case, opinfo.functions(entry)["inplace"], sample)
    assert prepared.host == {}
    assert prepared.tensors["input"].stride() != layouts.contiguous_strides(prepared.tensors["input"].shape)


def test_a_host_storage_is_taken_only_while_its_tensor_is_the_one_it_was_copied_to():
    import dataclasses

    case = Case(op="neg", variant="functional", dtype="float32", device="cpu", sample=0)
    entry = opinfo.get("neg")
    prepared = call.prepare(case, opinfo.functions(entry)["functional"], opinfo.samples(entry, torch.float32)[0])
    t = prepared.tensors["input"]
    kept = transfer.storage_of(t).clone()
    prepared.host["input"] = (kept, t.untyped_storage().data_ptr())  # as placed records it off the CPU
    assert call.host_storage(prepared, "input") is kept
    assert call.execute(prepared).before["input"] is kept  # the first snapshot, no copy
    remade = dataclasses.replace(prepared, tensors={"input": layouts.apply("contiguous", t)})  # other tensors, the same record
    assert call.host_storage(remade, "input") is None
    assert call.execute(remade).before["input"] is not kept
    assert call.host_storage(prepared, "other") is None


@cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_tensor_placed_on_the_device_is_the_one_laid_out_there_and_its_host_storage_holds_what_the_device_does(dtype):
    for shape in SHAPES:
        for name in layouts_of(shape):
            t = values(shape, dtype)
            laid, host = transfer.placed(name, t, "cuda")
            expected = layouts.apply(name, t.cuda())
            assert laid.device.type == "cuda" and host is not None and host.device.type == "cpu"
            assert call.metadata(laid) == call.metadata(expected), (shape, name)
            on_device = transfer.storage_of(laid).cpu()
            assert same(on_device, transfer.storage_of(expected).cpu()), (shape, name)
            assert same(on_device, host), (shape, name)


@cuda
@pytest.mark.parametrize("variant,op,layout", [
    ("functional", "mul", (("input", "strided"), ("other", "transposed"))),
    ("inplace", "addcmul", (("input", "offset"), ("tensor1", "expanded"))),
    ("out", "neg", (("out", "transposed_offset"),)),
    ("backward", "tanh", (("input", "permuted"), ("grad_output[0]", "strided"))),
])
def test_every_tensor_of_a_device_case_has_its_host_storage_and_the_call_starts_from_it(variant, op, layout):
    entry = opinfo.get(op)
    functions = opinfo.functions(entry)
    sample = opinfo.samples(entry, torch.float32)[0]
    case = Case(op=op, variant=variant, dtype="float32", device="cuda", sample=0, layouts=layout)
    result = None
    if variant in ("out", "backward"):
        functional = call.prepare(base_case(Case(op=op, variant="functional", dtype="float32", device="cuda", sample=0)),
                                  functions["functional"], sample)
        result = call.compute(functional)
    prepared = call.prepare(case, functions[variant], sample, reference_result=result)
    assert set(prepared.host) == set(prepared.tensors)
    for path, t in prepared.tensors.items():
        assert same(call.host_storage(prepared, path), transfer.storage_of(t.detach()).cpu()), path
    ran = call.execute(prepared)
    assert ran.error is None, ran.error
    assert all(ran.before[p] is call.host_storage(prepared, p) for p in prepared.tensors)
    # the references made from the host storages: their copies and their host view are the base tensors' own
    refs = References(call.prepare(base_case(case), functions["backward" if variant == "backward" else "functional"], sample,
                                   reference_result=result), torch.float32, seed=0)
    for path, t in refs.base.tensors.items():
        copy = refs._copies()[path]
        assert call.metadata(copy) == call.metadata(t) and same(transfer.storage_of(copy.detach()).cpu(), transfer.storage_of(t.detach()).cpu())
        assert same(refs.host[path], t.detach().cpu()), path
    assert refs.contiguous.ok


def cuda_config(**spec) -> SweepConfig:
    spec = dict(dtypes=("float32",), samples=3, workers=0, device="cuda") | spec
    return SweepConfig(ops=resolve_ops(spec.pop("ops")), **spec)


@pytest.fixture
def plant_cuda():
    library = torch.library.Library("aten", "IMPL")
    try:
        yield lambda op, kernel: library.impl(op, kernel, "CUDA")
    finally:
        library._destroy()


@cuda
def test_a_cuda_fill_writing_past_its_view_is_an_out_of_view_write_on_every_layout(plant_cuda, run_sweep):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plant_cuda("fill_.Scalar", kernels.fill_writing_past_its_view)
    result = run_sweep(cuda_config(ops="fill", variants=("inplace",), layouts=("contiguous", "strided", "offset", "empty")))
    assert result.findings
    assert {f.kind for f in result.findings} == {"out_of_view_write"}
    assert {dict(f.layouts).get("input", "contiguous") for f in result.findings} == {"contiguous", "strided", "offset", "empty"}
    assert result.statuses == {"finding": result.cases}


@cuda
def test_a_cuda_addcmul_dropping_noncontiguous_writes_is_caught_and_only_there(plant_cuda, run_sweep):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plant_cuda("addcmul_", kernels.addcmul_dropping_noncontiguous_writes)
    result = run_sweep(cuda_config(ops="addcmul", variants=("inplace",), layouts=("contiguous", "transposed", "strided", "offset"), samples=1))
    assert result.findings
    assert {dict(f.layouts).get("input") for f in result.findings} == {"transposed", "strided"}
    assert all(f.op == "aten.addcmul_.default" for f in result.findings)


@cuda
def test_clean_cuda_sweeps_over_every_variant_and_layout_stay_clean(run_sweep):
    result = run_sweep(cuda_config(ops="neg,addcmul,mul,tanh,fill,sum", variants=("functional", "inplace", "out", "backward")))
    assert result.cases > 200
    assert not result.findings, [(f.kind, f.op, f.variant, f.layouts, f.summary) for f in result.findings]
    assert not result.failed_units
