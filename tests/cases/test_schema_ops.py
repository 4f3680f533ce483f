"""Ops beyond OpInfo: aten overloads and custom ops swept with samples generated from their schema (``cases.schema``).

A stride-ignoring kernel planted on an aten op OpInfo has no entry for, and a
stride-ignoring custom op, are each found by ``torchsleuth ops`` and named
with the layout; the same runs without the bug are clean. The generator makes
working calls for schemas of different shapes, and names resolve as
documented. (No ``from __future__ import annotations``: torch 2.4's custom_op reads the annotations as types.)
"""

import json
import subprocess
import sys

import pytest
import torch

from torchsleuth.cases import opinfo, schema, select
from torchsleuth.cli.main import main
from torchsleuth.errors import UsageError
from torchsleuth.run.imports import IMPORTED

from conftest import AS_IF_CONTIGUOUS, plant_file  # the stride-ignoring read, and its plant

THRESHOLD_BACKWARD = AS_IF_CONTIGUOUS + '''

def threshold_backward(grad_output, self, threshold):
    grad, x = as_if_contiguous(grad_output), as_if_contiguous(self)  # the bug: both inputs' strides ignored
    return grad.masked_fill(x <= threshold, 0)


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("threshold_backward", threshold_backward, "CPU")
'''

CUSTOM_OPS = AS_IF_CONTIGUOUS + '''

@torch.library.custom_op("tsl_test::scale_wrong", mutates_args=(), device_types="cpu")
def scale_wrong(x: torch.Tensor, factor: float) -> torch.Tensor:
    return as_if_contiguous(x) * factor  # the bug: x's strides ignored


@torch.library.custom_op("tsl_test::scale_right", mutates_args=(), device_types="cpu")
def scale_right(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor
'''

FAST = ["--dtypes", "float32", "--variants", "functional", "--layouts", "transposed,strided", "--search", "none",
        "--oracles", "none", "--no-shrink", "--no-progress"]
NO_OPINFO = "aten.threshold_backward"  # OpInfo sweeps threshold (nn.functional.threshold), not its backward


def findings(tmp_path, *argv: str) -> tuple[int, list[dict]]:
    """Exit status and the findings file's findings of ``torchsleuth ops ARGV``."""
    out = tmp_path / "out"
    status = main(["ops", *argv, *FAST, "--out", str(out), "--json", str(out / "findings.json")])
    return status, json.loads((out / "findings.json").read_text())["findings"]


@pytest.fixture
def planted_threshold_backward(tmp_path):
    """A .py file that plants a stride-ignoring threshold_backward; unplanted again after the test (the CLI loads it here too)."""
    yield from plant_file(tmp_path / "plant.py", THRESHOLD_BACKWARD)


@pytest.fixture(scope="module")
def custom_ops(tmp_path_factory):
    """A .py file defining the custom ops (once per process: an op is defined once). Forgotten by run.imports after
    this module's tests, or every later sweep in this process would carry it as an import (oracles record it)."""
    path = tmp_path_factory.mktemp("custom") / "custom_ops.py"
    path.write_text(CUSTOM_OPS)
    yield str(path)
    IMPORTED.pop(str(path), None)


def layouts_of(finding: dict) -> set[str]:
    return {arg["layout"] for arg in finding["args"] if arg.get("layout")}


@pytest.mark.slow
def test_aten_op_without_opinfo_ignoring_strides_is_found(tmp_path, planted_threshold_backward):
    assert not select.covered_by_opinfo("aten.threshold_backward.default")
    status, found = findings(tmp_path, "--ops", NO_OPINFO, "--import", planted_threshold_backward, "--workers", "1")
    assert status == 1 and found
    assert {f["op"] for f in found} == {"aten.threshold_backward.default"}
    assert {f["kind"] for f in found} == {"mismatch"}
    assert {"transposed", "strided"} & set().union(*map(layouts_of, found))
    assert all(f["reference"] == "layout" and f["summary"].startswith("threshold_backward") for f in found)


def test_aten_op_without_opinfo_is_clean_without_the_plant(tmp_path):
    assert findings(tmp_path, "--ops", NO_OPINFO, "--workers", "0") == (0, [])


def test_custom_op_ignoring_strides_is_found_and_its_twin_is_clean(tmp_path, custom_ops):
    status, found = findings(tmp_path / "wrong", "--ops", "tsl_test::scale_wrong", "--import", custom_ops, "--workers", "1")
    assert status == 1 and found
    assert {(f["op"], f["variant"]) for f in found} == {("tsl_test.scale_wrong.default", "functional")}
    assert set().union(*map(layouts_of, found)) == {"transposed", "strided"}
    assert findings(tmp_path / "right", "--ops", "tsl_test::scale_right", "--import", custom_ops, "--workers", "1") == (0, [])


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "aten.sum.dim_IntList",  # a reduction: int[1]? dim, and keepdim left at its default
    "aten.add.Scalar",  # a binary op with a Scalar
    "aten._log_softmax.default",  # int dim, bool half_to_float
    "aten._foreach_add.List",  # Tensor[] and Tensor[]
    "aten.expand_copy.default",  # SymInt[] size, the tensor's shape
    "aten.index.Tensor",  # Tensor?[] indices, in range
])
def test_generated_samples_run(name):
    entry = opinfo.get(name)
    assert isinstance(entry, schema.SchemaOp) and opinfo.source(entry) == "schema"
    assert torch.float32 in entry.supported_dtypes("cpu")
    samples = list(entry.sample_inputs("cpu", torch.float32))
    assert 1 <= len(samples) <= schema.MAX_SAMPLES
    for sample in samples:
        entry.op(sample.input, *sample.args, **sample.kwargs)
    again = next(iter(entry.sample_inputs("cpu", torch.float32)))
    assert torch.equal(again.input[0] if isinstance(again.input, list) else again.input,
                       samples[0].input[0] if isinstance(samples[0].input, list) else samples[0].input)


@pytest.mark.slow
def test_in_place_overload_is_the_inplace_variant_and_the_functional_one_clones():
    entry = schema.for_name("aten.relu_.default")
    assert entry is schema.for_name("aten::relu_") and set(opinfo.functions(entry)) >= {"functional", "inplace", "backward"}
    x = -torch.ones(3)
    assert torch.equal(entry.op(x), torch.zeros(3)) and torch.equal(x, -torch.ones(3))
    assert opinfo.public_name(entry, "inplace") == "torch.ops.aten.relu_.default"
    assert eval(opinfo.public_name(entry, "functional"))(x).sum() == 0 and torch.equal(x, -torch.ones(3))


NORM_OUT = AS_IF_CONTIGUOUS + '''

def norm_out(self, p, dim, keepdim=False, *, out):
    result = torch.linalg.vector_norm(self, 2 if p is None else p, dim, keepdim)
    as_if_contiguous(out).copy_(result)  # the bug: out's strides ignored
    return out


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("norm.out", norm_out, "CPU")
'''


@pytest.fixture
def planted_norm_out(tmp_path):
    yield from plant_file(tmp_path / "plant_norm_out.py", NORM_OUT)


@pytest.mark.slow
def test_an_overload_swept_from_its_schema_has_its_out_overload_for_out_variant(tmp_path, planted_norm_out):
    entry = schema.for_name("aten.norm.ScalarOpt_dim")
    assert entry.supports_out and opinfo.public_name(entry, "out") == "torch.ops.aten.norm.out"
    assert not schema.for_name("aten.threshold_backward.default").supports_out  # its out= tensor is grad_input, not out
    def run(where, *extra):  # FAST's variants are the functional one alone
        out = tmp_path / where
        argv = ["--ops", "aten.norm.ScalarOpt_dim", "--variants", "out", "--layouts", "transposed,strided", "--dtypes", "float32",
                "--search", "none", "--oracles", "none", "--no-shrink", "--no-progress", "--workers", "1", *extra]
        status = main(["ops", *argv, "--out", str(out), "--json", str(out / "findings.json")])
        return status, json.loads((out / "findings.json").read_text())["findings"]

    status, found = run("planted", "--import", planted_norm_out)
    assert status == 1 and {(f["op"], f["variant"]) for f in found} == {("aten.norm.out", "out")}
    assert {"transposed", "strided"} & set().union(*map(layouts_of, found))
    # its repro calls norm.out, against the functional overload (norm.out without out= raises)
    script = tmp_path / "planted" / found[0]["repro"]
    assert "torch.ops.aten.norm.ScalarOpt_dim(" in script.read_text()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "BUG PRESENT" in done.stdout, done.stdout + done.stderr
    assert run("clean") == (0, [])


def test_names_resolve_to_overloads():
    assert select.resolve_ops("aten.add") == ("aten.add.Scalar", "aten.add.Tensor")  # covered by OpInfo, named all the same
    matched = select.resolve_ops("aten.threshold*")
    assert "aten.threshold_backward.default" in matched and "aten.threshold.default" not in matched
    assert schema.for_name("aten.add.out") is None and "aten.add.out" not in schema.aten_names()


@pytest.mark.parametrize("pattern, says", [
    ("aten.threshold_backwards", "unknown op 'aten.threshold_backwards'; did you mean aten.threshold_backward.default"),
    ("aten.bernoulli", "op 'aten.bernoulli' is not swept: it draws random numbers"),
    ("nosuch::op", "no op of namespace nosuch is registered"),
])
def test_a_bad_name_is_one_line_and_exit_2(pattern, says, capsys):
    assert main(["ops", "--ops", pattern]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


@torch.library.custom_op("tsl_test::always_refuses", mutates_args=())
def always_refuses(x: torch.Tensor) -> torch.Tensor:
    raise ValueError("refused")


def test_an_op_no_generated_call_works_for_says_why():
    with pytest.raises(UsageError, match="tsl_test.always_refuses.default makes no samples .no call generated from the "
                                         "schema succeeded: ValueError: refused"):
        select.units(select.resolve_ops("tsl_test::always_refuses"), ("float32",), "cpu")


def test_an_op_that_makes_no_samples_beside_others_is_noted_with_why(tmp_path):
    from torchsleuth.config import SweepConfig
    from torchsleuth.sweep import sweep

    config = SweepConfig(ops=select.resolve_ops(f"tsl_test::always_refuses,{NO_OPINFO}"), dtypes=("float32",), workers=0,
                         variants=("functional",), layouts=("contiguous",), shrink=False)
    result = sweep(config, db=tmp_path / "runs.db")
    assert result.cases and {n for n in result.notes if n[0] == "not swept"} == {
        ("not swept", "tsl_test.always_refuses.default: no call generated from the schema succeeded: ValueError: refused")}
