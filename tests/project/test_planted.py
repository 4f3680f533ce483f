"""Planted faults: each bug class torchsleuth claims to catch is caught, and named.

Each test replaces one aten CPU kernel with a Python kernel that is wrong in
one way under one condition (a layout, an argument, a dtype), runs a small
sweep over the op that reaches it, and checks that the findings name the op
and the condition: kind, variant, reference, and which argument has which
layout. Cases outside the condition must stay clean, so a test also fails
when torchsleuth blames the wrong argument or layout.

The wrong kernels that ``torchsleuth drill`` plants are these tests' too
(``torchsleuth.drill.kernels``); the ones only a test needs are written
here. In-process plants (``workers=0``) are registered with the ``plant``
fixture and removed when the test ends. Crash and hang plants are the
drill's plant modules (``torchsleuth.drill.plants``), loaded by each spawned
worker through ``SweepConfig.imports``, since they take the process down with
them.

A planted kernel cannot call the op it replaces (it would call itself); it
computes the right answer with other ops, and ``test_untouched_kernels_are_clean``
runs every sweep used here over the real kernels and expects no findings.
"""

from __future__ import annotations

import pytest
import torch

from torchsleuth import Finding, SweepConfig, SweepResult, resolve_ops
from torchsleuth.cases.layouts import SIZE1_STRIDE, contiguous_strides
from torchsleuth.drill import kernels
from torchsleuth.workers import faults

PLANTS = "torchsleuth.drill.plants"

# Layout classes, each told apart by the geometry a kernel sees: a kernel
# with a fast path keyed on one of these is wrong on exactly that layout.
LAYOUT_CLASSES = {
    "transposed": lambda t: t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1 and t.stride(-2) < t.stride(-1),
    "permuted": lambda t: t.dim() >= 3 and not t.is_contiguous() and t.stride(-1) == max(t.stride()),
    "strided": lambda t: t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) == 2,
    "offset": lambda t: t.storage_offset() != 0,
    "expanded": lambda t: any(n > 1 and s == 0 for n, s in zip(t.shape, t.stride())),
    "channels_last": lambda t: t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last),
    "channels_last_3d": lambda t: t.dim() == 5 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last_3d),
    "size1_strides": lambda t: any(n == 1 and s == SIZE1_STRIDE for n, s in zip(t.shape, t.stride())),
}

# The sweep each planted test runs (float32, 3 samples, in-process unless
# it says otherwise). test_untouched_kernels_are_clean runs each again
# without its plant.
SWEEPS = {
    "dropped_write": dict(ops="addcmul", variants=("inplace",), layouts=("contiguous", "transposed", "strided", "offset"), samples=1),
    "out_strides": dict(ops="neg", variants=("out",), layouts=("contiguous", "transposed", "strided", "offset")),
    "input_mutated": dict(ops="neg", variants=("functional",), layouts=("contiguous", "transposed")),
    "nondeterministic": dict(ops="neg", variants=("functional",), layouts=("contiguous",)),
    "out_of_view_write": dict(ops="fill", variants=("inplace",), layouts=("contiguous", "strided", "offset", "empty")),
    "storage_offset": dict(ops="sum", variants=("functional",), layouts=("contiguous", "offset")),
    "random_coverage": dict(ops="uniform", variants=("inplace",), layouts=("contiguous", "transposed", "strided")),
    "random_coverage_tensor_p": dict(ops="bernoulli_", variants=("inplace",), layouts=("contiguous", "transposed", "strided")),
    "accumulation_bfloat16": dict(ops="sum", dtypes=("bfloat16",), variants=("functional",), layouts=("contiguous",)),
    "accumulation_float32": dict(ops="sum", variants=("functional",), layouts=("contiguous",)),
    "crash": dict(ops="neg,abs", variants=("functional",), layouts=("contiguous", "transposed", "strided", "offset"), workers=1),
    "hang": dict(ops="neg,abs", variants=("functional",), layouts=("contiguous", "transposed", "strided", "offset"), workers=1, timeout=5.0),
    "gradient": dict(ops="tanh", variants=("backward",), layouts=("contiguous", "transposed")),
    "other_argument": dict(ops="mul", variants=("functional",), layouts=("contiguous", "transposed", "strided")),
    **{
        f"layout_{layout}": dict(ops="nn.functional.pad.replicate", variants=("functional",), layouts=("contiguous", layout), samples=0)
        for layout in LAYOUT_CLASSES
    },
}


def config(name: str, **extra) -> SweepConfig:
    spec = dict(dtypes=("float32",), samples=3, workers=0) | SWEEPS[name] | extra
    return SweepConfig(ops=resolve_ops(spec.pop("ops")), **spec)


def placed(finding: Finding) -> dict[str, str]:
    """Argument path -> layout, for the arguments the finding's case laid out non-contiguously."""
    return dict(finding.layouts)


def listing(result: SweepResult) -> str:
    lines = [f"statuses {result.statuses}; reasons {result.reasons}"]
    lines += [f"  {f.kind} {f.op} {f.variant} {f.dtype} {f.reference} {f.layouts}: {f.summary}" for f in result.findings]
    return "\n".join(lines)


def all_judged(result: SweepResult) -> bool:
    """Every case was judged (none skipped, raised, or failed inside torchsleuth)."""
    return set(result.statuses) <= {"pass", "finding"} and not result.failed_units


# --- right answers computed without the op being replaced ------------------------


def as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """``t``'s storage read (or written) with contiguous strides: what a kernel that ignores strides sees."""
    return t.as_strided(t.shape, contiguous_strides(t.shape), t.storage_offset())


def product(self, other) -> torch.Tensor:
    """``self * other`` through aten::mul.out, whose kernel stays untouched when mul.Tensor's is replaced."""
    if not isinstance(other, torch.Tensor):
        other = torch.tensor(other)
    out = torch.empty(torch.broadcast_shapes(self.shape, other.shape), dtype=torch.result_type(self, other), device=self.device)
    return torch.ops.aten.mul.out(self, other, out=out)


def replicate_pad(x: torch.Tensor, padding) -> torch.Tensor:
    """``replication_pad{1,2,3}d`` through index_select: each padded dim indexes its clamped source."""
    out = x
    for i in range(len(padding) // 2):
        dim = x.dim() - 1 - i
        left, right = padding[2 * i], padding[2 * i + 1]
        size = x.shape[dim]
        out = out.index_select(dim, (torch.arange(size + left + right) - left).clamp(0, size - 1))
    return out


# --- 1. in-place: dropped writes ---------------------------------------------------


def test_inplace_dropping_writes_on_a_noncontiguous_self_is_a_dropped_write(plant, run_sweep):
    plant("addcmul_", kernels.addcmul_dropping_noncontiguous_writes)
    result = run_sweep(config("dropped_write"))
    found = result.findings
    assert found, listing(result)
    for f in found:
        expected = ("dropped_write", "inplace", "layout", "aten.addcmul_.default", "addcmul", "float32")
        assert (f.kind, f.variant, f.reference, f.op, f.opinfo, f.dtype) == expected, listing(result)
        assert f.mismatch is not None and f.mismatch.path == "input"
    # flagged exactly where self is not contiguous: an offset self is contiguous and
    # is written; non-contiguous tensor1 or tensor2 with a contiguous self pass
    assert {placed(f).get("input", "contiguous") for f in found} == {"transposed", "strided"}, listing(result)
    assert {f.layouts for f in found} >= {(("input", "transposed"),), (("input", "strided"),)}
    assert all_judged(result) and result.statuses.get("pass", 0) > 0, listing(result)


# --- 2. out=: strides ignored ------------------------------------------------------


def neg_out_written_as_if_contiguous(self, *, out):
    as_if_contiguous(out).copy_(self * -1)  # the bug: out's own strides ignored
    return out


@pytest.mark.parametrize(
    "kernel, expected",
    [
        # values land in a transposed out in the wrong order; a strided one keeps
        # poison in half its elements and gets writes in its gaps
        (neg_out_written_as_if_contiguous, {"transposed": {"mismatch"}, "strided": {"out_ignored", "out_of_view_write"}}),
        (kernels.neg_out_restriding_out, {"transposed": {"out_ignored"}, "strided": {"out_ignored", "out_of_view_write"}}),
    ],
    ids=["written_as_if_contiguous", "restrided"],
)
def test_out_ignoring_its_strides_is_caught_on_that_out(plant, run_sweep, kernel, expected):
    plant("neg.out", kernel)
    result = run_sweep(config("out_strides"))
    assert result.findings, listing(result)
    kinds: dict[str, set[str]] = {}
    for f in result.findings:
        assert (f.op, f.opinfo, f.variant) == ("aten.neg.out", "neg", "out"), listing(result)
        assert len(f.layouts) == 1 and f.layouts[0][0] == "out", listing(result)
        assert f.mismatch is not None and f.mismatch.path == "out"
        kinds.setdefault(placed(f)["out"], set()).add(f.kind)
    # a contiguous or offset out is contiguous: written right, not flagged
    assert kinds == expected, listing(result)
    restrided = [f for f in result.findings if f.kind == "out_ignored" and f.reference == "contract"]
    assert all(f.mismatch.attribute == "stride" for f in restrided)
    assert bool(restrided) == (kernel is kernels.neg_out_restriding_out)


# --- 3. functional: input mutated --------------------------------------------------


def test_functional_op_writing_its_input_is_input_mutated(plant, run_sweep):
    plant("neg", kernels.neg_writing_its_input)
    result = run_sweep(config("input_mutated"))
    mutated = [f for f in result.findings if f.kind == "input_mutated"]
    assert {f.layouts for f in mutated} == {(), (("input", "transposed"),)}, listing(result)
    for f in mutated:
        assert (f.op, f.opinfo, f.variant, f.reference) == ("aten.neg.default", "neg", "functional", "contract")
        assert f.mismatch.path == "input" and f.mismatch.mismatched == f.mismatch.numel > 0


def test_functional_op_writing_its_input_is_reported_only_as_input_mutated(plant, run_sweep):
    plant("neg", kernels.neg_writing_its_input)
    result = run_sweep(config("input_mutated"))
    assert {f.kind for f in result.findings} == {"input_mutated"}, listing(result)


# --- determinism -------------------------------------------------------------------


def test_op_answering_differently_each_call_is_nondeterministic(plant, run_sweep):
    plant("neg", kernels.neg_counting_calls)
    result = run_sweep(config("nondeterministic"))
    # a few units of roundoff: only the bit-for-bit repeat of the call notices
    assert [(f.kind, f.reference, f.op, f.variant, f.layouts) for f in result.findings] == [
        ("nondeterministic", "determinism", "aten.neg.default", "functional", ())
    ], listing(result)


# --- 4. writes outside the view ----------------------------------------------------


def test_fill_writing_past_its_view_is_an_out_of_view_write(plant, run_sweep):
    plant("fill_.Scalar", kernels.fill_writing_past_its_view)
    result = run_sweep(config("out_of_view_write"))
    assert result.findings, listing(result)
    for f in result.findings:
        assert (f.kind, f.reference, f.op, f.opinfo, f.variant) == ("out_of_view_write", "contract", "aten.fill_.Scalar", "fill", "inplace"), listing(result)
        assert (f.mismatch.path, f.mismatch.attribute, f.mismatch.mismatched) == ("input", "storage", 1)
    # every case writes past its view: on every layout of self, an empty self included
    assert {placed(f).get("input", "contiguous") for f in result.findings} == {"contiguous", "strided", "offset", "empty"}, listing(result)
    assert result.statuses == {"finding": result.cases}, listing(result)


# --- 5. layout reference: storage offset ignored -----------------------------------


def test_reduction_ignoring_the_storage_offset_mismatches_on_offset(plant, run_sweep):
    # aten::sum (no dim) reaches this kernel too on the CPU
    plant("sum.dim_IntList", kernels.sum_ignoring_storage_offset)
    result = run_sweep(config("storage_offset"))
    assert result.findings, listing(result)
    for f in result.findings:
        assert (f.kind, f.reference, f.opinfo, f.variant, f.layouts) == ("mismatch", "layout", "sum", "functional", (("input", "offset"),)), listing(result)
        assert f.mismatch.path == "out" and f.mismatch.attribute == "values"
    assert {f.op for f in result.findings} == {"aten.sum.default", "aten.sum.dim_IntList"}, listing(result)
    assert result.statuses.get("pass", 0) > 0  # the contiguous cases


# --- 6. random fills: coverage -----------------------------------------------------


def test_random_fill_skipping_elements_of_a_noncontiguous_self_is_random_coverage(plant, run_sweep):
    plant("uniform_", kernels.uniform_skipping_noncontiguous_elements)
    result = run_sweep(config("random_coverage"))
    assert result.findings, listing(result)
    for f in result.findings:
        expected = ("random_coverage", "contract", "aten.uniform_.default", "uniform", "inplace")
        assert (f.kind, f.reference, f.op, f.opinfo, f.variant) == expected, listing(result)
        assert 0 < f.mismatch.mismatched < f.mismatch.numel and f.mismatch.path == "input"
    assert {placed(f).get("input", "contiguous") for f in result.findings} == {"transposed", "strided"}, listing(result)
    assert all_judged(result) and result.statuses.get("pass", 0) > 0


def bernoulli_tensor_p_skipping_noncontiguous_elements(self, p, *, generator=None):
    """``bernoulli_(p)`` with a probability per element that draws only every other element of a non-contiguous
    ``self``: a kernel of its own (``bernoulli_.Tensor``), not the one a float ``p`` reaches."""
    draws = (torch.rand(self.shape, dtype=torch.float64, generator=generator) < p.double()).to(self.dtype)
    if self.is_contiguous():
        return self.copy_(draws)
    every_other = torch.arange(self.numel()).reshape(self.shape) % 2 == 0
    return self.copy_(torch.where(every_other, draws, self))  # the bug


def test_bernoulli_with_a_probability_per_element_skipping_elements_of_a_noncontiguous_self_is_random_coverage(plant, run_sweep):
    plant("bernoulli_.Tensor", bernoulli_tensor_p_skipping_noncontiguous_elements)
    result = run_sweep(config("random_coverage_tensor_p"))
    assert result.findings, listing(result)
    for f in result.findings:
        expected = ("random_coverage", "contract", "aten.bernoulli_.Tensor", "bernoulli_", "inplace")
        assert (f.kind, f.reference, f.op, f.opinfo, f.variant) == expected, listing(result)
    assert {placed(f).get("input", "contiguous") for f in result.findings} == {"transposed", "strided"}, listing(result)
    assert result.statuses.get("pass", 0) > 0  # the float p's cases, and the contiguous ones


# --- 7. precision reference: low-precision accumulation ----------------------------


def long_reduction(f: Finding) -> bool:
    """Whether the finding's case is the engine's own long-reduction sample (3 rows of 1024)."""
    return f.call is not None and any(spec.path == "input" and tuple(spec.shape) == (3, 1024) for spec in f.call.tensors)


def test_bfloat16_reduction_accumulating_in_bfloat16_is_a_precision_mismatch(plant, run_sweep):
    plant("sum.dim_IntList", kernels.sum_accumulating_bfloat16_in_bfloat16)
    result = run_sweep(config("accumulation_bfloat16"))
    caught = [f for f in result.findings if long_reduction(f)]
    assert caught, listing(result)
    for f in caught:
        assert (f.kind, f.reference, f.dtype, f.op, f.variant, f.layouts) == ("mismatch", "precision", "bfloat16", "aten.sum.dim_IntList", "functional", ())


def test_float32_reduction_accumulating_in_bfloat16_is_a_precision_mismatch(plant, run_sweep):
    def sum_dim(self, dim, keepdim=False, *, dtype=None):
        if self.dtype == torch.float32 and dtype in (None, torch.float32):
            # the bug: the accumulator is bfloat16
            return kernels.sequential_sum(self.to(torch.bfloat16), dim or [], keepdim).to(torch.float32)
        return kernels.exact_sum(self, dim or [], keepdim, dtype)

    plant("sum.dim_IntList", sum_dim)
    result = run_sweep(config("accumulation_float32"))
    for f in result.findings:
        assert (f.kind, f.reference, f.dtype, f.opinfo, f.variant, f.layouts) == ("mismatch", "precision", "float32", "sum", "functional", ()), listing(result)
    caught = [f for f in result.findings if long_reduction(f)]
    assert [f.op for f in caught] == ["aten.sum.dim_IntList"], listing(result)
    assert caught[0].mismatch.max_abs_err > caught[0].mismatch.allowed


# --- 8, 9. isolation: crash and hang -------------------------------------------------


def assert_only_transposed_neg_failed(result: SweepResult, kind: str) -> None:
    assert [(f.kind, f.reference, f.op, f.opinfo, f.variant, f.dtype, f.layouts) for f in result.findings] == [
        (kind, "isolation", "neg", "neg", "functional", "float32", (("input", "transposed"),))
    ], listing(result)
    # the sweep went on: every other case of neg, and all of abs (run after it), passed
    assert result.statuses == {"finding": 1, "pass": result.cases - 1}, listing(result)
    assert result.cases == 8 and not result.failed_units  # 2 ops x (contiguous + 3 layouts of input)


def test_kernel_killing_its_process_is_a_crash_and_the_sweep_goes_on(run_sweep):
    result = run_sweep(config("crash", imports=(f"{PLANTS}.crash",)))
    assert_only_transposed_neg_failed(result, "crash")
    assert "SIGSEGV" in result.findings[0].summary
    # where in the case it died (workers.faults): the planted kernel, called from the case's call
    place = faults.placed(result.findings[0].detail)
    assert place.startswith("drill/kernels.py:") and " neg_crashing_on_transposed < run/call.py:" in place, result.findings[0].detail


@pytest.mark.slow
def test_kernel_never_returning_is_a_hang_and_the_sweep_goes_on(run_sweep):
    result = run_sweep(config("hang", imports=(f"{PLANTS}.hang",)))
    assert_only_transposed_neg_failed(result, "hang")
    assert "5 s" in result.findings[0].summary
    # where it hung: the stacks the replay's worker wrote when asked, before it was killed (workers.faults)
    place = faults.placed(result.findings[0].detail)
    assert place.startswith("drill/kernels.py:") and " neg_hanging_on_transposed < run/call.py:" in place, result.findings[0].detail


# --- 10. gradients -----------------------------------------------------------------


def test_backward_wrong_on_a_noncontiguous_grad_output_is_a_gradient_mismatch(plant, run_sweep):
    plant("tanh_backward", kernels.tanh_backward_wrong_on_noncontiguous_grad)
    result = run_sweep(config("gradient"))
    assert result.findings, listing(result)
    for f in result.findings:
        assert (f.kind, f.reference, f.op, f.opinfo, f.variant) == ("gradient_mismatch", "layout", "aten.tanh.default", "tanh", "backward"), listing(result)
        assert placed(f).get("grad_output[0]") == "transposed", listing(result)
        assert f.mismatch.path == "grad[input]"
    # a transposed input alone (a contiguous grad_output) is not blamed
    assert (("grad_output[0]", "transposed"),) in {f.layouts for f in result.findings}
    assert all_judged(result) and result.statuses.get("pass", 0) > 0


# --- 11. layout reference: one argument --------------------------------------------


def test_kernel_wrong_on_a_noncontiguous_other_names_that_argument(plant, run_sweep):
    def mul(self, other):
        if isinstance(other, torch.Tensor) and other.dim() and not other.is_contiguous():
            other = as_if_contiguous(other)  # the bug: other's strides ignored
        return product(self, other)

    plant("mul.Tensor", mul)
    result = run_sweep(config("other_argument"))
    assert result.findings, listing(result)
    for f in result.findings:
        assert (f.kind, f.reference, f.op, f.opinfo, f.variant) == ("mismatch", "layout", "aten.mul.Tensor", "mul", "functional"), listing(result)
        assert placed(f).get("args[0]") in ("transposed", "strided"), listing(result)
    # the single-argument cases pin it on other; a non-contiguous self alone passes
    assert {(("args[0]", "transposed"),), (("args[0]", "strided"),)} <= {f.layouts for f in result.findings}
    assert all_judged(result) and result.statuses.get("pass", 0) > 0


# --- layout classes ----------------------------------------------------------------


@pytest.mark.parametrize("layout", list(LAYOUT_CLASSES))
def test_kernel_wrong_on_one_layout_class_is_pinned_on_it(plant, run_sweep, layout):
    wrong_here = LAYOUT_CLASSES[layout]

    def replication_pad(self, padding):
        result = replicate_pad(self, padding)
        return result + 1 if wrong_here(self) else result  # the bug, on this layout only

    for op in ("replication_pad1d", "replication_pad2d", "replication_pad3d"):
        plant(op, replication_pad)
    result = run_sweep(config(f"layout_{layout}"))
    assert result.findings, listing(result)
    for f in result.findings:
        expected = ("mismatch", "layout", "nn.functional.pad.replicate", "functional", (("input", layout),))
        assert (f.kind, f.reference, f.opinfo, f.variant, f.layouts) == expected, listing(result)
        assert f.op.startswith("aten.replication_pad")
    assert result.statuses.get("pass", 0) > 0


# --- the same sweeps, untouched ------------------------------------------------------


@pytest.mark.parametrize("name", list(SWEEPS))
def test_untouched_kernels_are_clean(run_sweep, name):
    result = run_sweep(config(name))
    assert result.findings == (), listing(result)
    assert "error" not in result.statuses and not result.failed_units, listing(result)
    assert result.statuses.get("pass", 0) > 0, listing(result)
