"""The overloads an op's samples never reach, swept from their schema in a pointed run (``cases.unreached``).

``torch.norm`` calls ``linalg_vector_norm``, so ``aten.norm.ScalarOpt_dim``'s own
kernel is never called by the ``norm`` entry's samples. A stride-ignoring
kernel planted there is found by a run pointed at ``norm.fro`` and named by
that overload and the layout; the same run without the plant is clean, and the
coverage counts the overload reached. A catalog run, and a pointed run without
the ``overloads`` search, add nothing. (No ``from __future__ import
annotations``, as in test_schema_ops.py.)
"""

import dataclasses
import json

import pytest

from torchsleuth.cases import schema, unreached
from torchsleuth.cli.main import main
from torchsleuth.config import SweepConfig
from torchsleuth.sweep import depth

from conftest import AS_IF_CONTIGUOUS, plant_file  # the stride-ignoring read, and its plant, as tests/cases/test_schema_ops.py has them

NORM_SCALAROPT_DIM = AS_IF_CONTIGUOUS + '''

def norm(self, p, dim, keepdim=False):
    # the bug: self's strides ignored
    return torch.linalg.vector_norm(as_if_contiguous(self), 2 if p is None else p, dim, keepdim)


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("norm.ScalarOpt_dim", norm, "CPU")
'''

POINTED = ["--ops", "norm.fro", "--dtypes", "float32", "--variants", "functional", "--layouts", "transposed,strided",
           "--search", "overloads", "--oracles", "none", "--no-shrink", "--no-progress", "--workers", "1"]


@pytest.fixture
def planted_norm(tmp_path):
    yield from plant_file(tmp_path / "plant.py", NORM_SCALAROPT_DIM)


def run(tmp_path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "out"
    status = main(["ops", *POINTED, *extra, "--out", str(out), "--json", str(out / "findings.json")])
    return status, json.loads((out / "findings.json").read_text())


def test_the_overloads_no_sample_of_norm_reaches_are_named_and_each_is_a_schema_entry():
    found = unreached.unreached("norm.fro")
    assert "aten.norm.ScalarOpt_dim" in found and "aten.norm.Scalar" in found
    assert not any(o.endswith("_out") or o == "aten.norm.out" for o in found)  # out= overloads are no entries
    assert all(not schema.why_not(o) for o in found)
    assert not set(found) & unreached._traced("norm.fro")  # none a traced sample of the entry named
    assert "aten.linalg_vector_norm.default" in unreached._traced("norm.fro")
    assert {"aten.isin.Tensor_Scalar", "aten.isin.Scalar_Tensor"} <= set(unreached.unreached("isin"))  # other names
    assert unreached.unreached("abs") == ()  # abs, abs_ and their out= are what its samples reach
    assert unreached.unreached("aten.norm.Scalar") == ()  # an op swept from its schema adds nothing


@pytest.mark.slow
def test_a_stride_ignoring_kernel_of_an_overload_no_sample_reaches_is_found_by_a_pointed_run(tmp_path, planted_norm, capsys):
    status, report = run(tmp_path, "--import", planted_norm)
    assert status == 1
    # norm.Scalar's kernel calls norm.ScalarOpt_dim's, so it shows the planted bug too; the norm entry's own calls do not
    assert "aten.norm.ScalarOpt_dim" in {f["op"] for f in report["findings"]}
    assert {f["op"] for f in report["findings"]} <= {"aten.norm.ScalarOpt_dim", "aten.norm.Scalar"}
    assert {f["kind"] for f in report["findings"]} == {"mismatch"}
    assert all(f["reference"] == "layout" for f in report["findings"])
    assert {"transposed", "strided"} & {a.get("layout") for f in report["findings"] for a in f["args"]}
    assert "no sample reaches aten.norm.Scalar, aten.norm.ScalarOpt_dim" in " ".join(capsys.readouterr().out.split())


def test_the_same_run_without_the_plant_is_clean_and_counts_the_overloads_reached(tmp_path):
    status, report = run(tmp_path)
    assert (status, report["findings"]) == (0, [])
    norm = next(o for o in report["coverage"]["ops"] if o["op"] == "norm.fro")
    assert {"aten.norm.ScalarOpt_dim", "aten.norm.Scalar"} <= set(norm["reached"])
    assert "aten.norm.ScalarOpt_dim" not in {u["overload"] for u in norm["unreached"]}


def test_only_a_pointed_run_with_the_overloads_search_adds_them():
    config = SweepConfig(command="ops", device="cpu", ops=("norm.fro",), search=("overloads",))
    assert depth(config, deep=False).ops == ("norm.fro",)
    assert depth(dataclasses.replace(config, search=("values",)), deep=True).ops == ("norm.fro",)
    deep = depth(config, deep=True).ops
    assert deep[0] == "norm.fro" and "aten.norm.ScalarOpt_dim" in deep and len(deep) == len(set(deep))
