"""A group's line names what was wrong: the overload, its variant where the name does not say it, and "compiled" where
every finding is of a call torch.compile made (the compiled variant's cases), so a compiled bug never reads as eager's."""

from __future__ import annotations

import dataclasses

from torchsleuth.report import terminal, view


def finding(case_id: str) -> view.FindingView:
    blank = {f.name: () if f.name == "layouts" else "" for f in dataclasses.fields(view.FindingView)}
    return view.FindingView(**{**blank, "id": "f-0", "case_id": case_id, "found_as": case_id})


def group(*case_ids: str, op: str = "aten.sum.dim_IntList", variant: str = "functional") -> view.GroupView:
    return view.GroupView(id="g-0", summary="", diagnosis="", op=op, kind="mismatch", variant=variant, reference="layout",
                          dtypes=("float32",), devices=("cpu",), layouts=("contiguous",), findings=tuple(map(finding, case_ids)))


def test_a_group_of_compiled_calls_says_compiled_and_an_eager_one_does_not():
    compiled = "sum|functional|float32|cpu|s3|contiguous|@compile:static"
    eager = "sum|functional|float32|cpu|s3|transposed"
    assert terminal._op(group(compiled)) == "aten.sum.dim_IntList, compiled"
    assert terminal._op(group(eager)) == "aten.sum.dim_IntList"
    assert terminal._op(group(compiled, eager)) == "aten.sum.dim_IntList"  # not every finding is compiled
    assert terminal._op(group(compiled, op="Adam.step", variant="step")) == "Adam.step, compiled"
