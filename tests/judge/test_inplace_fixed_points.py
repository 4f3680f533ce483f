"""An in-place op that leaves an element as it was drops a write only where the op's exact value there is another one.

gelu(inf) = inf: torch 2.13's in-place gelu_ on a transposed self (the
scalar path) leaves +inf as it is, right, while the contiguous call (the
vector path) gives NaN. That discrepancy is real, but the element is a fixed
point of gelu, so the finding says the op writes wrong values, not that it
drops its writes. An abs_ that writes nothing into a non-contiguous self
drops the writes to its negative elements (its positive ones are fixed
points, counted as written): still a dropped_write, counting those.
"""

from __future__ import annotations

import torch

from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case

GELU_TRANSPOSED = "aten.gelu_.default|inplace|float32|cpu|s0|input=transposed|special:input=nonfinite;size:4>2;size:3>2"


def test_gelu_leaving_a_fixed_point_as_it_was_writes_wrong_values_but_drops_nothing():
    outcome = run_case(Case.parse(GELU_TRANSPOSED))
    kinds = {f.kind for f in outcome.findings}
    assert "dropped_write" not in kinds, [f.summary for f in outcome.findings]
    if outcome.findings:  # torch 2.13: inf on the scalar path, NaN on the vector path
        assert outcome.findings[0].summary == "in-place gelu_ writes wrong values into a transposed self"


def abs_ignoring_a_non_contiguous_self(self):
    """abs_ that returns at once when self is not contiguous (no write at all)."""
    if not self.is_contiguous():
        return self
    return self.copy_(torch.abs(self))


def test_an_in_place_op_writing_nothing_still_drops_the_writes_that_change_values(plant):
    plant("abs_", abs_ignoring_a_non_contiguous_self)
    outcome = run_case(Case.parse("abs|inplace|float32|cpu|s0|input=transposed"))
    dropped = [f for f in outcome.findings if f.kind == "dropped_write"]
    assert dropped, [f.summary for f in outcome.findings]
    f = dropped[0]
    assert f.summary.startswith("in-place abs_ on a transposed self leaves "), f.summary
    m = f.mismatch
    left = int(f.summary.split(" leaves ")[1].split(" of ")[0])
    assert m is not None and left == m.mismatched < m.numel, (f.summary, m)  # the negative elements; the others were fixed points
