"""Structured inputs: the ``matrices``, ``duplicates`` and ``sequences`` searches.

Three planted bugs, each reached only by a structured input: a forward-mode
derivative of ``linalg.matrix_power`` wrong only at a singular matrix (an
Autograd kernel whose jvp takes a shortcut there), a reverse-mode derivative
of ``linalg.inv`` wrong only at an ill-conditioned matrix, past the
second-order allowance there (a backward through a truncated
pseudo-inverse), and a ``scatter_add``
CPU kernel that drops every write past the 256th into one slot in bfloat16.
Each is found by a run pointed at the op with the default searches and
oracles, named with its structure edit; missed with the other searches
alone; and the same runs over the real kernels have no finding of that
kind. The plans follow what the op is (the linalg group, a square first
tensor, an index argument, a working dim), and the edits hold the structure
they name, exactly.
"""

from __future__ import annotations

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops, search
from torchsleuth.cases.records import Case
from torchsleuth.run.samples import samples_of
from torchsleuth.search import duplicates, edits, matrices, sequences
from torchsleuth.sweep import depth


def pointed(op: str, dtype: str, **extra) -> SweepConfig:
    """``torchsleuth ops --ops OP`` in this process, its defaults (every search, the cheap oracles), in one dtype."""
    return depth(SweepConfig(**{**dict(ops=resolve_ops(op), dtypes=(dtype,), workers=0, search=search.names(), shrink=False), **extra}),
                 deep=True)


def _power(a, n):
    eye = torch.eye(a.shape[-1], dtype=a.dtype).expand(a.shape)
    base = a if n >= 0 else torch.linalg.inv(a)
    out = eye
    for _ in range(abs(n)):
        out = out @ base
    return out


def _power_tangent(a, t, n):
    """The tangent of ``a^n`` along ``t``: the sum over k of ``a^k t a^(n-1-k)`` (for n < 0, of the inverse's power)."""
    if n == 0:
        return torch.zeros_like(a)
    if n < 0:
        b = torch.linalg.inv(a)
        return _power_tangent(b, -(b @ t @ b), -n)
    return sum(_power(a, k) @ t @ _power(a, n - 1 - k) for k in range(n))


class _MatrixPower(torch.autograd.Function):
    """``linalg.matrix_power``, its value and reverse mode right; its forward mode takes ``n a^(n-1) t`` at a singular
    matrix, as if ``a`` and the tangent commuted there."""

    @staticmethod
    def forward(a, n):
        with torch._C._AutoDispatchBelowAutograd():
            return torch.linalg.matrix_power(a, n)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])
        ctx.n = inputs[1]

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return _power_tangent(a.mH, g, ctx.n), None

    @staticmethod
    def jvp(ctx, t, _):
        (a,) = ctx.saved_tensors
        n = ctx.n
        singular = torch.linalg.matrix_rank(a) < a.shape[-1]
        if n > 1 and bool(singular.any()):  # the bug: a shortcut for singular matrices
            return n * _power(a, n - 1) @ t
        return _power_tangent(a, t, n)


class _InvTruncated(torch.autograd.Function):
    """``linalg.inv``, its value and forward mode right; its float32 backward takes the inverse from a pseudo-inverse
    that drops singular values below 1/32 of the largest (``rtol=2**-5``, a fast path): exact at OpInfo's matrices
    (condition number 2.25), wrong at a near-singular or ill-conditioned one by far more than perturbation theory's
    second order allows there (judge.conditioning)."""

    @staticmethod
    def forward(a):
        with torch._C._AutoDispatchBelowAutograd():
            return torch.linalg.inv(a)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)
        ctx.save_for_forward(inputs[0], output)

    @staticmethod
    def backward(ctx, g):
        a, inverse = ctx.saved_tensors
        shortcut = (torch.linalg.pinv(a, rtol=2.0 ** -5) if a.dtype == torch.float32 else inverse).mH
        return -(shortcut @ g @ shortcut)

    @staticmethod
    def jvp(ctx, t):
        _, inverse = ctx.saved_tensors
        return -(inverse @ t @ inverse)


def scatter_add_dropping_past_256(self, dim, index, src):
    """``scatter_add`` whose bfloat16 kernel counts a slot's writes in 8 bits: every write past the 256th along ``dim``
    is dropped (OpInfo's samples write a few times into a slot, and are right)."""
    if self.dtype == torch.bfloat16 and index.dim() and index.shape[dim] > 256:
        index, src = index.narrow(dim, 0, 256), src.narrow(dim, 0, 256)
    return torch.scatter_reduce(self, dim, index, src, "sum")


def structured(findings, verb: str) -> list:
    return [f for f in findings if any(e.startswith(verb + ":") for e in Case.parse(f.case_id).edits)]


# --- the planted bugs ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_forward_mode_derivative_wrong_only_at_a_singular_matrix_is_found_named_with_the_structure(autograd_plant, run_sweep):
    autograd_plant("linalg_matrix_power", _MatrixPower.apply)
    result = run_sweep(pointed("linalg.matrix_power", "float32"))
    forward = [f for f in result.findings if Case.parse(f.case_id).oracle == "autodiff:forward"]
    assert forward, "no forward-mode finding"
    assert all(Case.parse(f.case_id).op == "linalg.matrix_power" for f in forward)
    assert all(f.summary.startswith("forward-mode derivative of") for f in forward), forward[0].summary
    triggers = {e for f in forward for e in Case.parse(f.case_id).edits if e.startswith("matrix:")}
    assert len(structured(forward, "matrix")) == len(forward), [f.case_id for f in forward]  # only at a structured matrix
    assert triggers & {"matrix:input=singular", "matrix:input=rank-deficient", "matrix:input=batched"}, triggers
    assert not triggers & {"matrix:input=near-singular", "matrix:input=ill-conditioned"}  # invertible: the jvp is right there


@pytest.mark.slow
def test_a_gradient_wrong_only_at_an_ill_conditioned_matrix_is_found_past_the_second_order_allowance(autograd_plant, run_sweep):
    autograd_plant("linalg_inv", _InvTruncated.apply)
    result = run_sweep(pointed("linalg.inv", "float32", variants=("backward",)))
    found = [f for f in result.findings if f.kind == "gradient_mismatch" and f.reference == "precision"]
    assert found, "no gradient finding"
    assert len(structured(found, "matrix")) == len(found), [f.case_id for f in found]  # only at a structured matrix
    triggers = {e for f in found for e in Case.parse(f.case_id).edits if e.startswith("matrix:")}
    assert triggers <= {"matrix:input=near-singular", "matrix:input=ill-conditioned", "matrix:input=batched"}, triggers
    assert all(f.summary.startswith("linalg_inv backward [float32]") for f in found), found[0].summary


@pytest.mark.slow
def test_the_singular_matrix_bug_is_missed_without_the_matrices_search(autograd_plant, run_sweep):
    autograd_plant("linalg_matrix_power", _MatrixPower.apply)
    others = tuple(name for name in search.names() if name != "matrices")
    result = run_sweep(pointed("linalg.matrix_power", "float32", search=others))
    assert not [f for f in result.findings if Case.parse(f.case_id).oracle == "autodiff:forward"]


@pytest.mark.slow
def test_an_index_reduction_wrong_past_256_duplicates_in_bfloat16_is_found_named_with_the_count(plant, run_sweep):
    plant("scatter_add", scatter_add_dropping_past_256)
    found = [f for f in run_sweep(pointed("scatter_add", "bfloat16")).findings if f.op == "aten.scatter_add.default"]
    assert found, "no finding"
    assert len(structured(found, "dup")) == len(found), [f.case_id for f in found]
    assert {e for f in found for e in Case.parse(f.case_id).edits if e.startswith("dup:")} == {"dup:384", "dup:3072"}
    others = tuple(name for name in search.names() if name != "duplicates")
    assert not [f for f in run_sweep(pointed("scatter_add", "bfloat16", search=others)).findings if f.op == "aten.scatter_add.default"]


@pytest.mark.slow
@pytest.mark.parametrize(("op", "dtype", "verb"), [("linalg.matrix_power", "float32", "matrix"), ("linalg.inv", "float32", "matrix"),
                                                   ("scatter_add", "bfloat16", "dup")])
def test_the_same_runs_over_the_real_kernels_have_no_finding_at_a_structured_input(op, dtype, verb, run_sweep):
    result = run_sweep(pointed(op, dtype))
    assert result.cases and not structured(result.findings, verb), [f.case_id for f in structured(result.findings, verb)][:5]


# --- what each op is planned, and what the edits hold ------------------------------------------------


def _first(op: str, dtype: str, fits):
    return next(s for s in samples_of(op, dtype) if fits(s))


def test_the_matrix_kinds_follow_what_the_op_is():
    square = lambda s: s.input.dim() == 2 and s.input.shape[-1] >= 4  # noqa: E731
    det = matrices.plan("linalg.det", "functional", "float64", _first("linalg.det", "float64", square))
    assert [e[0].rpartition("=")[2] for e in det] == list(matrices.KINDS)
    inv = matrices.plan("linalg.inv", "functional", "float64", _first("linalg.inv", "float64", square))
    assert [e[0].rpartition("=")[2] for e in inv] == ["near-singular", "ill-conditioned", "batched"]  # it needs an inverse
    solve = matrices.plan("linalg.solve", "functional", "float64", _first("linalg.solve", "float64", square))
    assert "batched" not in {e[0].rpartition("=")[2] for e in solve}  # B would have to be batched alike
    assert matrices.plan("mm", "functional", "float64", _first("mm", "float64", lambda s: True)) == []  # not linear algebra
    assert matrices.plan("linalg.det", "functional", "int64", _first("linalg.det", "float64", square)) == []


def test_the_matrices_hold_the_structure_they_name():
    a = torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    singular = matrices.structured(a, "singular")
    for read in (singular, singular.mT):  # a zero pivot however a kernel reads it: by rows, or transposed
        assert torch.linalg.matrix_rank(read) == 3 and torch.linalg.lu_factor_ex(read).LU.diagonal().eq(0).any()
        assert torch.linalg.det(read) == 0 and torch.linalg.slogdet(read).logabsdet == -torch.inf
    assert torch.linalg.matrix_rank(matrices.structured(a, "rank-deficient")) == 2
    near = matrices.structured(a, "near-singular")
    assert torch.linalg.matrix_rank(near) == 4 and 2 ** 6 / 10 < torch.linalg.cond(near) < 2 ** 6 * 1e3  # float64: b = 6
    assert torch.linalg.cond(matrices.structured(a, "ill-conditioned")) > 2 ** 6 / 10
    batch = matrices.structured(a, "batched", inverse=True)
    assert batch.shape == (3, 4, 4) and torch.equal(batch[0], a) and torch.equal(batch[1], near)
    h = a + a.mT
    assert all(torch.equal(m, m.mT) for m in (matrices.structured(h, k) for k in matrices.KINDS[:4]))  # hermitian stays so
    sample = _first("linalg.det", "float32", lambda s: s.input.dim() == 2 and s.input.shape[-1] >= 2)
    assert edits.apply(sample, ("matrix:input=singular",), op="linalg.det").input.dtype == torch.float32


def test_duplicates_aim_every_index_at_one_slot_with_a_source_of_ones_and_only_where_writes_combine():
    sample = _first("index_add", "bfloat16", lambda s: s.input.dim() == 2 and s.args[2].dim() == 2)
    assert duplicates.plan("index_add", "functional", "bfloat16", sample) == [("dup:384",), ("dup:3072",)]
    grown = edits.apply(sample, ("dup:384",), op="index_add")
    index, source, dim = grown.args[1], grown.args[2], grown.args[0]
    assert index.shape == (384,) and bool((index == index[0]).all()) and source.shape[dim] == 384 and bool((source == 1).all())
    exact = torch.zeros(grown.input.shape, dtype=torch.float64).index_add(dim, index, source.double())
    assert exact.max() == 384  # the exact sum the reference holds: every write into one slot
    scatter = _first("scatter_add", "float32", lambda s: s.input.dim() == 2)
    laid = edits.apply(scatter, ("dup:3072",), op="scatter_add")
    d = laid.args[0]
    assert laid.args[1].shape[d] == 3072 and bool((laid.args[1] == laid.args[1].narrow(d, 0, 1)).all())
    assert duplicates.plan("index_copy", "functional", "float32", samples_of("index_copy", "float32")[1]) == []  # one write wins
    assert duplicates.plan("scatter_add", "functional", "int64", scatter) == []  # integer sums are exact
    puts = samples_of("put", "float32")
    planned = {bool(s.args[2]) for s in puts if len(s.args) > 2 and duplicates.plan("put", "functional", "float32", s)}
    assert planned == {True}  # put_ without accumulate keeps one write in no specified order


def test_sequences_along_the_working_dim_and_zeros_only_for_products():
    sample = samples_of("cumsum", "bfloat16")[1]  # (5, 5, 5) along dim 1
    planned = sequences.plan("cumsum", "functional", "bfloat16", sample)
    assert planned[0] == (f"dim:input@1>{sequences.LENGTH}", "seq:input@1=monotone")
    assert {e[-1].rpartition("=")[2] for e in planned} == set(sequences.KINDS)
    monotone = edits.apply(sample, planned[0], op="cumsum").input
    assert monotone.shape[1] == sequences.LENGTH and bool((monotone.diff(dim=1) > 0).all())  # strictly, in bfloat16
    prod = samples_of("prod", "float32")[1]  # (5, 5, 5) along dim 0
    assert {e[-1].rpartition("=")[2] for e in sequences.plan("prod", "functional", "float32", prod)} == set(sequences.ZERO_KINDS)
    two = sequences.along(prod.input, 0, "two-zeros")
    assert bool((two[0] == 0).all() and (two[2] == 0).all()) and torch.equal(two[1], prod.input[1])  # the first and the middle
    cancelling = sequences.along(torch.zeros(8, dtype=torch.float32), 0, "cancelling")
    assert cancelling.double().sum() == 4  # the large terms cancel exactly: the small ones are the sum
    assert sequences.plan("index_add", "functional", "float32", samples_of("index_add", "float32")[4]) == []  # an index op
