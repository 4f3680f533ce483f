"""The ``exact`` oracle: float64 results judged against mpmath. Planted kernels wrong in a tail, or whose intermediate
overflows where the exact result fits, are found by a pointed run and named with the point and the exact value; their
scripts exit 1 with the plant and 0 without; the real kernels of the same ops are clean."""

from __future__ import annotations

import textwrap

import mpmath as mp
import pytest
import torch

from conftest import run_with_and_without
from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.judge.plugin import decode_detail
from torchsleuth.oracles.exact import judging
from torchsleuth.run import exact_functions as functions
from torchsleuth.run.exact import exact
from torchsleuth.oracles.exact.detail import Detail
from torchsleuth.report import repro
from torchsleuth.sweep import depth

# Each plant is a module's source: the script test runs it before the repro script, the sweep test execs it here.
ERFC_TAIL = textwrap.dedent('''
    import torch
    from torchsleuth.drill.override import planted

    def erfc_flushing_its_tail(x):
        """float64 erfc that returns 0 past x = 10, where the exact value (2e-45 at 10) is still far above float64's
        smallest; the other dtypes' kernels and the rest of the range are right."""
        out = torch.ops.aten.erfc.out(x, out=torch.empty_like(x))
        return torch.where(x > 10, torch.zeros_like(out), out) if x.dtype == torch.float64 else out

    LIBRARY = planted("erfc", erfc_flushing_its_tail)
''')
HYPOT_NAIVE = textwrap.dedent('''
    import torch
    from torchsleuth.drill.override import planted

    def hypot_squaring_first(x, y):
        """float64 hypot as sqrt(x*x + y*y): the squares overflow past 1.3e154, where the exact result fits."""
        return torch.sqrt(x * x + y * y) if x.dtype == torch.float64 else torch.ops.aten.hypot.out(x, y, out=torch.empty_like(x))

    LIBRARY = planted("hypot", hypot_squaring_first)
''')
PLANTS = {"erfc": ERFC_TAIL, "hypot": HYPOT_NAIVE}


def pointed(op: str) -> SweepConfig:
    return depth(SweepConfig(ops=resolve_ops(op), dtypes=("float64",), workers=0, oracles=("exact",), search=()), deep=True,
                 given={"oracles", "search"})


@pytest.fixture
def planted_module():
    """Exec a plant's source here; its library lives until the test ends."""
    held = []

    def run(source: str):
        space: dict = {}
        exec(compile(source, "<plant>", "exec"), space)
        held.append(space["LIBRARY"])

    yield run
    for library in held:
        library._destroy()


@pytest.mark.slow
@pytest.mark.parametrize("op", list(PLANTS))
def test_a_float64_kernel_wrong_where_the_exact_value_says_so_is_found_named_and_its_script_shows_it(op, planted_module, run_sweep, tmp_path):
    planted_module(PLANTS[op])
    found = [f for f in run_sweep(pointed(op)).findings if f.reference == "arbitrary-precision"]
    assert found, f"{op}: no finding"
    finding = found[0]
    detail = decode_detail(Detail, finding)
    assert finding.op == f"aten.{op}.default" and finding.kind == "mismatch" and finding.dtype == "float64"
    if op == "erfc":
        assert all(float.fromhex(p[0]) > 10 for p in detail.points)  # the tail, and only there
        assert float(mp.mpf(detail.expected[0])) > 0 and finding.mismatch.actual == "0.0"
    else:  # the squares overflow (or underflow), the exact value fits
        assert all(not 1e-154 < max(abs(float.fromhex(v)) for v in p) < 1e154 for p in detail.points)
        assert any(max(abs(float.fromhex(v)) for v in p) > 1e154 for p in detail.points)
    runs = run_with_and_without(repro.script(finding), PLANTS[op], tmp_path)
    assert runs["planted.py"].returncode == 1, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert "WRONG" in runs["planted.py"].stdout
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr


@pytest.mark.slow
@pytest.mark.parametrize("op", ["erfc", "hypot", "exp", "lgamma", "sin", "atan2", "special.erfcx", "log1p"])
def test_the_real_kernels_are_clean(op, run_sweep):
    result = run_sweep(pointed(op))
    assert not [f.summary for f in result.findings if f.reference == "arbitrary-precision"]
    assert result.statuses.get("pass", 0) > 0  # the exact cases ran


def test_an_ill_conditioned_point_allows_what_a_rounded_argument_explains_and_no_more():
    sin = functions.FUNCTIONS["sin"]
    x = 2.0 ** 60  # sin's argument reduction: the exact sin of the float 2^60
    right = float(mp.sin(mp.mpf(x)))
    assert judging.judge(sin, [(x,)], [right], (), torch.float64)[0] == []
    near_pi = 3.141592653589793  # sin is ill-conditioned relative to its value here: |x cos x| / |sin x| ~ 3e16
    y = exact(sin, (near_pi,), ())
    off_by_a_rounded_argument = float(y) + near_pi * 2.0 ** -53
    assert judging.judge(sin, [(near_pi,)], [off_by_a_rounded_argument], (), torch.float64)[0] == []
    bad, judged = judging.judge(sin, [(near_pi,)], [float(y) + 1e-13], (), torch.float64)  # what no rounding explains
    assert judged == 1 and len(bad) == 1


def test_a_formula_that_cancels_at_the_working_precision_is_left_unjudged_and_domains_hold():
    cancelling = functions.Exact(arity=1, fn=lambda x: mp.log(mp.ncdf(x)), source="mp.log(mp.ncdf(x))")
    assert exact(cancelling, (16.0,), ()) is None  # 1 - 6e-58 keeps a digit of its tail at 192 bits, all at 384
    assert exact(functions.FUNCTIONS["special.log_ndtr"], (40.0,), ()) < 0  # the stable form: -3.7e-350
    zeta = functions.FUNCTIONS["special.zeta"]
    assert exact(zeta, (0.5, 1.0), ()) is None and exact(zeta, (2.0, 1.0), ()) is not None  # s > 1 only
    assert exact(functions.FUNCTIONS["log"], (-1.0,), ()) is None  # complex: PyTorch's NaN is its own business
