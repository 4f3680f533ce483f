"""Kernel reach: the overloads an op's cases reach, the ``overloads`` search, undeclared siblings, coverage.

Plants replace one aten CPU kernel (``torch.library``, as tests/test_planted.py
does) with one that is wrong only where OpInfo's samples never go: in
``aten::add.Scalar``, which no Python entry point reaches (``torch.add(x, 2.0)``
calls ``add.Tensor``), and in ``aten::relu_``, the in-place sibling
``nn.functional.relu``'s OpInfo entry does not declare.
"""

from __future__ import annotations

import io
import json

import torch
from rich.console import Console

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases import opinfo, reach
from torchsleuth.report import findings_file, terminal
from torchsleuth.run.samples import samples_of
from torchsleuth.run.search import overloads


def add_scalar_wrong_in_float32(self, other, alpha=1):
    """``add.Scalar`` off by 0.5 in float32 (through ``add.Tensor``, whose kernel is untouched)."""
    result = torch.ops.aten.add.Tensor(self, torch.scalar_tensor(other, dtype=self.dtype), alpha=alpha)
    if self.dtype == torch.float32:
        result = torch.ops.aten.add.Tensor(result, torch.scalar_tensor(0.5, dtype=self.dtype))
    return result


def relu_in_place_wrong_in_float32(self):
    """``relu_`` that leaves 0.25 where it should write 0, in float32."""
    fill = 0.25 if self.dtype == torch.float32 else 0.0
    return self.copy_(torch.where(self > 0, self, torch.full_like(self, fill)))


def config(ops: str, **extra) -> SweepConfig:
    spec = dict(dtypes=("float32",), variants=("functional",), layouts=("contiguous",), samples=2, workers=0) | extra
    return SweepConfig(ops=resolve_ops(ops), **spec)


def listing(result) -> str:
    return "\n".join([f"statuses {result.statuses}; reasons {result.reasons}"]
                     + [f"  {f.kind} {f.op} {f.variant} {f.case_id}: {f.summary}" for f in result.findings])


# --- what an op can reach ----------------------------------------------------------------


def test_found_overloads_are_those_with_a_kernel():
    found = reach.found(opinfo.get("add"))
    assert {"aten.add.Tensor", "aten.add.Scalar", "aten.add.out", "aten.add_.Tensor", "aten.add_.Scalar"} <= set(found)
    assert "aten.add.int" not in found  # a TorchScript operator, no kernel in the dispatcher
    assert reach.number_slots(opinfo.get("add")) == {"other": ("aten.add.Scalar",)}
    assert reach.number_slots(opinfo.get("pow")) == {"exponent": ("aten.pow.Tensor_Scalar",), "self": ("aten.pow.Scalar",)}


def test_the_scalar_edit_makes_a_number_and_the_overload_is_called_by_name():
    sample = samples_of("add", "float32")[0]
    edited = overloads.apply(sample, "args[0]@aten.add.Scalar")
    assert edited.args[0] == sample.args[0].reshape(-1)[0].item() and isinstance(edited.args[0], float)
    planned = overloads.plan("add", "functional", "float32", sample)
    assert ("scalar:args[0]",) in planned and ("scalar:args[0]@aten.add.Scalar",) in planned
    functions = reach.calls(opinfo.get("add"), opinfo.functions(opinfo.get("add")), ("scalar:args[0]@aten.add.Scalar",))
    assert functions["functional"] is torch.ops.aten.add.Scalar and functions["inplace"] is torch.ops.aten.add_.Scalar
    assert reach.name_of(functions["out"]) == "torch.ops.aten.add.Scalar_out"


# --- (a) a bug in an overload no sample reaches -----------------------------------------------


def test_a_bug_in_add_scalar_is_found_by_the_overloads_search(plant, run_sweep):
    plant("add.Scalar", add_scalar_wrong_in_float32)
    assert not run_sweep(config("add")).findings  # OpInfo's samples never reach it
    result = run_sweep(config("add", search=("overloads",)))
    assert result.findings, listing(result)
    for f in result.findings:
        assert (f.op, f.opinfo, f.kind, f.reference) == ("aten.add.Scalar", "add", "mismatch", "precision"), listing(result)
        assert "scalar:args[0]@aten.add.Scalar" in f.case_id and f.call.function == "torch.ops.aten.add.Scalar"


def test_the_overloads_search_is_clean_on_the_real_kernels(run_sweep):
    result = run_sweep(config("add,pow,clamp", variants=("functional", "inplace", "out"), search=("overloads",)))
    assert not result.findings, listing(result)
    assert result.statuses.get("pass", 0) > 0 and not result.statuses.get("error"), listing(result)


# --- (b) a bug in an in-place sibling OpInfo does not declare ----------------------------------


def test_undeclared_siblings_are_offered_and_declared_variants_kept():
    relu = opinfo.get("nn.functional.relu")
    assert relu.inplace_variant is None and opinfo.undeclared(relu) == ("inplace",)
    assert opinfo.functions(relu)["inplace"] is torch.relu_
    for name in ("add", "addcmul", "maximum", "where"):  # every variant declared, nothing added
        entry = opinfo.get(name)
        assert opinfo.undeclared(entry) == ()
        assert opinfo.functions(entry)["functional"] is entry.op


def test_a_bug_in_an_undeclared_in_place_sibling_is_found(plant, run_sweep):
    sweep = config("nn.functional.relu", variants=("inplace",), layouts=("contiguous", "transposed"))
    assert not run_sweep(sweep).findings
    plant("relu_", relu_in_place_wrong_in_float32)
    result = run_sweep(sweep)
    assert result.findings, listing(result)
    assert {(f.op, f.opinfo, f.variant) for f in result.findings} == {("aten.relu_.default", "nn.functional.relu", "inplace")}
    [relu] = result.coverage.ops
    assert dict(relu.undeclared)["inplace"] == result.cases


# --- (c) coverage ----------------------------------------------------------------------


def test_coverage_counts_reached_overloads_and_names_the_unreached(run_sweep):
    result = run_sweep(config("add", variants=("functional", "inplace", "out")))
    [add] = result.coverage.ops
    assert {"aten.add.Tensor", "aten.add_.Tensor", "aten.add.out"} <= set(add.reached), add
    assert dict(add.unreached)["aten.add.Scalar"] == "no case passes a Python number (--search overloads)"
    assert len(add.reached) + len(add.unreached) == len(add.found)

    screen = io.StringIO()
    terminal.summary(result, console=Console(file=screen, width=200))
    assert f"kernel coverage: {len(add.reached)} of {len(add.found)} aten overloads reached, over 1 op" in screen.getvalue()
    assert "aten.add.Scalar" in screen.getvalue()

    data = findings_file.document(command="ops", device="cpu", torch_version=torch.__version__, cases=result.cases, seconds=1.0,
                                  findings=(), groups=(), repro_paths={}, coverage=result.coverage)
    [entry] = json.loads(json.dumps(data))["coverage"]["ops"]
    assert entry["op"] == "add" and set(entry["reached"]) == set(add.reached)
    assert {"overload": "aten.add.Scalar", "why": "no case passes a Python number (--search overloads)"} in entry["unreached"]

    searched = run_sweep(config("add", variants=("functional", "inplace", "out"), search=("overloads",)))
    [add] = searched.coverage.ops
    assert set(add.reached) == set(add.found) and not add.unreached, add
