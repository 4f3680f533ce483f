"""Which cases share a compiled function (oracles.compile.compiler, "Storage offsets").

Dynamo guards a tensor's sizes and strides, not its storage offset, so a graph compiled for a tensor at offset 0 would
run again for a tensor at an offset, while the case's repro script compiles for the offset. A case at an offset must be
compiled for it: inductor compiles a graph for it (one counted by the compiler's backend), where a second contiguous
case of the same shape reuses the first's graph (none counted).
"""

from __future__ import annotations

import pytest
import torch

from torchsleuth.cases.records import Case
from torchsleuth.oracles.compile.compiler import Compiler, uncached

# inductor's own imports warn of deprecations on some releases
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _at(offset: int, values: torch.Tensor) -> torch.Tensor:
    storage = torch.zeros(values.numel() + offset)
    view = storage.as_strided(values.shape, values.stride(), offset)
    view.copy_(values)
    return view


def _graphs_for(compiler: Compiler, case_id: str, x: torch.Tensor) -> int:
    """How many graphs inductor compiled for this case's call (0: an earlier case's was reused)."""
    compiled = compiler.get(Case.parse(case_id), torch.sinh)
    before = compiler.graphs  # 0 where get() began a new function
    with uncached():
        result = compiled((x,), {})
    assert torch.allclose(result, torch.sinh(x))
    return compiler.graphs - before


def test_a_case_at_a_storage_offset_is_compiled_for_it_not_given_a_contiguous_cases_graph():
    torch._dynamo.reset()
    compiler = Compiler()
    x = torch.randn(4, 3)
    assert _graphs_for(compiler, "sinh|functional|float32|cpu|s0|contiguous", x) == 1
    assert _graphs_for(compiler, "sinh|functional|float32|cpu|s1|contiguous", x.clone()) == 0  # the scope's graph reused
    assert _graphs_for(compiler, "sinh|functional|float32|cpu|s0|input=offset", _at(3, x)) == 1
    torch._dynamo.reset()
