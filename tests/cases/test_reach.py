"""Kernel reach: the overloads an op's cases reach, the ``overloads`` search, undeclared siblings, coverage
(with the internal kernels the ``internal`` search calls directly), entries named by a Python path.

Plants replace one aten CPU kernel (``torch.library``, as tests/project/test_planted.py
does) with one that is wrong only where OpInfo's samples never go: in
``aten::add.Scalar``, which no Python entry point reaches (``torch.add(x, 2.0)``
calls ``add.Tensor``), and in ``aten::relu_``, the in-place sibling
``nn.functional.relu``'s OpInfo entry does not declare.
"""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import torch
from rich.console import Console

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases import opinfo, reach
from torchsleuth.report import findings_file, terminal
from torchsleuth.store import coverage
from torchsleuth.run.samples import samples_of
from torchsleuth.search import overloads


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


def summary_line(result) -> str:
    screen = io.StringIO()
    terminal.summary(result, console=Console(file=screen, width=200))
    return next(line for line in screen.getvalue().splitlines() if line.startswith("kernel coverage"))


def coverage_in_the_file(result) -> dict:
    data = findings_file.document(command="ops", device="cpu", torch_version=torch.__version__, cases=result.cases, seconds=1.0,
                                  findings=(), groups=(), repro_paths={}, coverage=result.coverage)
    return json.loads(json.dumps(data))["coverage"]


def test_internal_kernels_called_directly_are_counted_apart_from_the_ops_own(run_sweep):
    searched = run_sweep(config("nn.functional.group_norm", search=("internal",), samples=1))
    [group_norm] = searched.coverage.ops
    assert "aten.native_group_norm.default" in group_norm.internal, group_norm
    assert not set(group_norm.internal) & set(group_norm.found)  # not the op's own overloads: found and reached keep their meaning
    assert searched.coverage.internal == len(group_norm.internal) > 0
    n = searched.coverage.internal
    assert summary_line(searched) == (f"kernel coverage: {len(group_norm.reached)} of {len(group_norm.found)} aten overloads reached, over 1 op; "
                                      f"{n} internal kernel{'s' if n != 1 else ''} called directly")
    written = coverage_in_the_file(searched)
    assert written["internal_called"] == n and written["ops"][0]["internal_called"] == list(group_norm.internal)
    assert (written["found"], written["reached"]) == (searched.coverage.found, searched.coverage.reached)

    plain = run_sweep(config("nn.functional.group_norm", samples=1))
    [group_norm] = plain.coverage.ops
    assert group_norm.internal == () and plain.coverage.internal == 0
    assert summary_line(plain).endswith("over 1 op; 0 internal kernels called directly")
    written = coverage_in_the_file(plain)
    assert written["internal_called"] == 0 and written["ops"][0]["internal_called"] == []


def test_only_judged_cases_that_call_an_internal_kernel_count():
    def row(case_id: str, status: str):
        return (case_id, status, "", 0.1)

    rows = [row("nn.functional.group_norm|functional|float32|cpu|s0|contiguous|internal:aten.native_group_norm.default#0>0", "pass"),
            row("nn.functional.group_norm|functional|float32|cpu|s0|input=transposed|internal:aten.native_group_norm.default#0>0", "finding"),
            row("softmax|functional|float32|cpu|s0|input=strided|internal:aten._softmax.default#0", "raised"),  # refused: not covered
            row("add|functional|float32|cpu|s0|contiguous|scalar:args[0]@aten.add.Scalar", "pass"),  # the op's own overload
            row("add|functional|float32|cpu|s1|contiguous", "pass")]
    assert coverage.called_directly(rows) == {"nn.functional.group_norm": {"aten.native_group_norm.default"}}


# --- (d) entries named by a Python path --------------------------------------------------------


def test_an_entry_named_by_its_python_path_gets_the_packet_aten_has():
    named = {"nn.functional.embedding": "embedding", "nn.functional.celu": "celu", "nn.functional.threshold": "threshold",
             "nn.functional.one_hot": "one_hot", "nn.functional.pixel_shuffle": "pixel_shuffle", "special.bessel_j0": "special_bessel_j0",
             "linalg.tensorinv": "linalg_tensorinv", "torch._scaled_mm": "_scaled_mm", "torch.ops.aten._safe_softmax.default": "_safe_softmax",
             "nn.functional.relu": "relu", "softmax": "softmax", "add": "add"}  # the last three: OpInfo's own aten name, kept
    for name, packet in named.items():
        entry = opinfo.get(name)
        assert reach.aten_name(entry) == packet and packet in reach.packets(entry), (name, reach.packets(entry))
    assert {"aten.embedding.default", "aten.embedding_dense_backward.default"} <= set(reach.found(opinfo.get("nn.functional.embedding")))
    # an entry with no aten name at all: the path alone
    for path, packet in {"nn.functional.softmax": "softmax", "nn.functional.relu": "relu", "nn.functional.embedding": "embedding"}.items():
        assert reach.aten_name(SimpleNamespace(name=path)) == packet and reach.packets(SimpleNamespace(name=path))
    # no aten op of its own: nothing found (not masked.sum -> sum, nor signal.windows.hamming -> hamming_window)
    for name in ("masked.sum", "signal.windows.hamming", "nn.functional.interpolate.bilinear", "nn.functional.grid_sample"):
        assert reach.packets(opinfo.get(name)) == (), name


def test_the_coverage_of_an_entry_named_by_its_python_path_is_not_empty(run_sweep):
    result = run_sweep(config("nn.functional.embedding", variants=("functional", "backward"), samples=1))
    [embedding] = result.coverage.ops
    assert {"aten.embedding.default", "aten.embedding_dense_backward.default"} <= set(embedding.reached), embedding
    assert dict(embedding.unreached)["aten.embedding.out"] == "no out= case"
