"""The shrink stage: planted faults come back minimised, replayed, grouped and diagnosed."""

from __future__ import annotations

import math

import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case
from torchsleuth.shrink.shrinker import candidates, cost, shrink


def config(ops: str, **extra) -> SweepConfig:
    spec = dict(dtypes=("float32",), variants=("inplace",), layouts=("contiguous", "transposed", "strided", "offset"), samples=3, workers=0) | extra
    return SweepConfig(ops=resolve_ops(ops), **spec)


def drops_writes_on_noncontiguous_self(self, tensor1, tensor2, *, value=1):
    if not self.is_contiguous():
        return self  # the bug: nothing lands in self
    return self.add_(tensor1 * tensor2 * value)


def test_a_dropped_write_shrinks_to_a_tiny_case_and_its_diagnosis_names_self(plant, run_sweep):
    plant("addcmul_", drops_writes_on_noncontiguous_self)
    result = run_sweep(config("addcmul", dtypes=("float32", "float64")))
    assert result.findings and not result.flaky
    for finding in result.findings:
        shrunk = result.shrunk[finding.id]
        assert shrunk.status == "shrunk", shrunk
        reported = result.reported(finding)
        assert reported.id == finding.id and reported.kind == "dropped_write"
        sizes = {t.path: math.prod(t.shape) for t in reported.call.tensors}
        # no larger than needed: a 2x2 self is the smallest that can be transposed or strided
        # (the size edit narrows every dim of one size at once), and the other two shrink to
        # scalars or single rows
        assert sizes["input"] == 4, sizes
        assert all(n <= 2 for path, n in sizes.items() if path != "input"), sizes
        assert cost(Case.parse(shrunk.case_id)) < cost(Case.parse(finding.case_id))
        assert dict(Case.parse(shrunk.case_id).layouts).keys() == {"input"}
    # one bug, one group: transposed and strided self are the same property (strides)
    assert len(result.groups) == 1, [g.summary for g in result.groups]
    diagnosis = result.groups[0].diagnosis
    assert "addcmul_" in diagnosis and "drops its writes when self is" in diagnosis, diagnosis
    assert "transposed" in diagnosis and "strided" in diagnosis, diagnosis
    assert "contiguous self" in diagnosis and "storage offset" in diagnosis, diagnosis
    assert "float32" in diagnosis and "float64" in diagnosis, diagnosis


def test_the_diagnosis_names_the_argument_and_dtype_that_trigger_it(plant, run_sweep):
    def addcdiv(self, tensor1, tensor2, *, value=1):
        out = self + value * (tensor1 / tensor2.contiguous())
        if self.dtype == torch.float64 and not tensor2.is_contiguous():
            return out * 2  # the bug: float64 with a non-contiguous divisor
        return out

    plant("addcdiv", addcdiv)
    result = run_sweep(config("addcdiv", variants=("functional",), dtypes=("float32", "float64")))
    assert result.findings
    assert {f.kind for f in result.findings} == {"mismatch"}
    assert {f.dtype for f in result.findings} == {"float64"}
    for finding in result.findings:
        shrunk = Case.parse(result.shrunk[finding.id].case_id)
        assert shrunk.dtype == "float64" and {p for p, _ in shrunk.layouts} == {"args[1]"}, shrunk
    diagnosis = result.groups[0].diagnosis
    assert "when args[1] is" in diagnosis and "contiguous args[1]" in diagnosis, diagnosis
    assert "in float64; float32 is fine" in diagnosis, diagnosis


def test_a_finding_that_does_not_recur_on_replay_is_flaky_not_a_bug(plant, run_sweep):
    wrong = {"once": True}

    def addcmul_(self, tensor1, tensor2, *, value=1):
        if wrong["once"] and not self.is_contiguous():
            wrong["once"] = False
            return self  # wrong the first time, never again
        return self.add_(tensor1 * tensor2 * value)

    plant("addcmul_", addcmul_)
    result = run_sweep(config("addcmul", samples=1))
    assert not result.findings and len(result.flaky) == 1, (result.findings, result.flaky)
    assert result.shrunk[result.flaky[0].id].status == "flaky"
    assert not result.groups


def test_shrinking_keeps_what_it_cannot_replay_here():
    from torchsleuth.judge.records import Finding

    crash = Finding(id="f-1", kind="crash", op="aten.neg.default", opinfo="neg", variant="functional", dtype="float32",
                    device="cpu", reference="isolation", case_id="neg|functional|float32|cpu|s0|contiguous", layouts=(), summary="")
    shrunk = shrink(crash, run_case)
    assert shrunk.status == "kept" and "fresh worker" in shrunk.reason


def test_a_clean_op_has_nothing_to_shrink(run_sweep):
    result = run_sweep(config("addcmul"))
    assert not result.findings and not result.shrunk and not result.groups


def test_edits_round_trip_through_the_case_id():
    case = Case(op="addcmul", variant="inplace", dtype="float32", device="cpu", sample=8,
                layouts=(("input", "strided"),), edits=("size:5>2", "values:args[0]=ones"))
    assert Case.parse(case.id) == case
    plain = Case(op="addcmul", variant="inplace", dtype="float32", device="cpu", sample=8)
    assert Case.parse(plain.id) == plain and "|" not in plain.id.split("|s8|")[1]


# --- combined layouts shrink to their parts ------------------------------------------


def neg_config(layouts: tuple[str, ...]) -> SweepConfig:
    return SweepConfig(ops=resolve_ops("neg"), dtypes=("float32",), variants=("functional",), layouts=layouts, samples=3, workers=0)


def neg_wrong_when(condition):
    """A ``neg`` whose result is off by one when ``condition(input)`` holds."""

    def neg(x):
        out = torch.empty(x.shape, dtype=x.dtype)
        torch.ops.aten.neg.out(x, out=out)
        return out + 1 if condition(x) else out

    return neg


def transposed(x) -> bool:
    """The last two dims swapped in memory, wherever the view starts."""
    return x.dim() >= 2 and x.shape[-1] > 1 and x.shape[-2] > 1 and x.stride(-2) < x.stride(-1)


def test_a_combined_layout_costs_its_parts_and_is_replaced_by_each():
    def case(*layouts):
        return Case(op="neg", variant="functional", dtype="float32", device="cpu", sample=0, layouts=layouts)

    pair, part, other = case(("input", "transposed_offset")), case(("input", "transposed")), case(("input", "offset"))
    assert cost(case()) < cost(part) == cost(other) < cost(pair)
    moved = {c.layouts for c in candidates(pair) if not c.edits and c.sample == 0 and c.dtype == "float32"}
    assert {(), part.layouts, other.layouts} <= moved
    assert {c.layouts for c in candidates(part)} <= {(), part.layouts}  # a simple layout has no parts to try


def test_a_bug_of_one_part_found_under_the_combination_shrinks_to_that_part_and_joins_its_group(plant, run_sweep):
    plant("neg", neg_wrong_when(transposed))
    result = run_sweep(neg_config(("contiguous", "transposed", "transposed_offset", "offset")))
    found_under = {layout for f in result.findings for _, layout in f.layouts}
    assert found_under == {"transposed", "transposed_offset"}, found_under
    for finding in result.findings:
        shrunk = result.shrunk[finding.id]
        assert shrunk.status == "shrunk" and Case.parse(shrunk.case_id).layouts == (("input", "transposed"),), shrunk
    # one bug, one group: the one of transposed input, not a new one of transposed input at an offset
    assert len(result.groups) == 1, [g.summary for g in result.groups]
    summary = result.groups[0].summary
    assert "non-contiguous input" in summary and "offset" not in summary, summary
    assert len(result.groups[0].findings) == len(result.findings)


def test_a_bug_of_the_pair_alone_keeps_the_combined_layout_and_names_both(plant, run_sweep):
    plant("neg", neg_wrong_when(lambda x: not x.is_contiguous() and x.storage_offset() > 0))
    result = run_sweep(neg_config(("contiguous", "transposed", "strided", "offset", "transposed_offset", "strided_offset")))
    found_under = {layout for f in result.findings for _, layout in f.layouts}
    assert found_under == {"transposed_offset", "strided_offset"}, found_under
    for finding in result.findings:
        shrunk = result.shrunk[finding.id]
        assert shrunk.status == "shrunk", shrunk
        assert Case.parse(shrunk.case_id).layouts in ((("input", "transposed_offset"),), (("input", "strided_offset"),)), shrunk
    assert len(result.groups) == 1, [g.summary for g in result.groups]
    group = result.groups[0]
    assert "non-contiguous+offset input" in group.summary, group.summary
    assert "at a storage offset" in group.diagnosis and ("transposed" in group.diagnosis or "strided" in group.diagnosis), group.diagnosis


def test_a_clean_op_under_combined_layouts_stays_clean(run_sweep):
    result = run_sweep(neg_config(("contiguous", "transposed", "offset", "transposed_offset", "strided_offset")))
    assert not result.findings and not result.shrunk and not result.groups
    assert result.statuses.get("pass", 0) >= 5
