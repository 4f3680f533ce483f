"""Tolerances: one table by dtype, and one rule that widens it.

The rule. An element ``i`` of a result in dtype ``d`` may differ from its
expected value ``e_i`` by at most

    allowed_i = atol + rtol * |e_i| + SLACK * sqrt(s) * k_i * (1 + sqrt(n) * u_acc / u_d)
                + [s > 1] * SCALE_ULPS * u_d * max_j |e_j|

* ``atol``, ``rtol``: the table below for the dtype of the result (the
  values ``torch.testing`` uses), widened to the op's own
  ``toleranceOverride`` from the OpInfo database where PyTorch declares one.
  This covers the final rounding to ``d``.
* ``k_i``: how far the float64 result moves at element ``i`` when every
  floating input is nudged by a random relative amount up to ``u_d``, the
  unit roundoff of the case's dtype (the largest of two nudges). It measures
  the op's sensitivity to rounding at that precision where the values are:
  large near a discontinuity (floor, sign, argmax ties), at cancellation, and
  along long sums; zero for exact ops. Low-precision results are therefore
  judged against how far rounding at their own precision can move them, not
  against a constant.
* ``s``: how many ops that compute something the call dispatched to (1 for a
  single kernel; dozens for a composite op or a backward graph). Each rounds
  its result; independent roundings add up like a random walk.
* ``n``: the reduction length (input elements per output element, for ops
  PyTorch tags ``reduction``; the square of the writes the ``duplicates``
  search aims at one slot, for an index reduction, since equal terms round
  alike and their error grows with their count; 1 otherwise), and ``u_acc``: the unit roundoff
  of the type PyTorch accumulates in (float32 for float16 and bfloat16, the
  dtype itself otherwise). A sum of ``n`` terms accumulated in ``u_acc``
  strays by up to about ``sqrt(n)`` times the input sensitivity; accumulating
  float16 in float16 strays by far more and is caught.
* scans (``cumsum``, ``cumprod``, ``logcumsumexp``: run.facts.SCANS), one
  term more: ``SLACK * sqrt(n) * u_acc * |e_i|``. Element i of a scan is
  the last of a chain of partial results, each rounded at its own size, not
  at its terms' (which ``k_i`` measures): a kernel that accumulates float32
  in float32 (CUDA's does; the CPU's accumulates in double) strays by about
  ``sqrt(n)`` roundings of the result's size. Accumulating float16 in
  float16 strays by far more and is still caught.
* jumps: where the float64 result moves by more than ``JUMP_RATIO`` times
  ``k_i`` when the inputs are nudged by ``JUMP`` (16) units of roundoff
  either way, the op is discontinuous there (floor, a pixel edge in
  grid_sample, an index at a near-tie), and rounding inside the kernel can
  cross the edge as well: the size of that jump is allowed too. It is only
  computed when a comparison fails without it.
* ``SCALE_ULPS * u_d * max_j |e_j|``, for calls made of more than one op
  only: a few units of roundoff of the largest expected value of the result.
  Ops built from several kernels round every intermediate to their dtype;
  where an element is the small difference of large intermediates
  (``1 - tanh(x)^2`` in float16 near saturation, say), its error is that of
  the intermediates, not of itself. A single kernel has no intermediates in
  its dtype, so it gets no such term, and a dropped or unwritten element
  shows however small it is.
* comparing two results that both carry rounding error (layout and device
  references) doubles the slack term; the device reference adds
  ``DEVICE_FACTOR * |cpu_i - float64_i|``, how far the CPU's own result in
  ``d`` is from float64 at that element.

TF32. On CUDA, float32 convolutions (and matrix products, when
``torch.backends.cuda.matmul.allow_tf32`` is set) may run in TF32, which keeps
10 mantissa bits: float16's. Where the flag for the op's family is on, a
float32 (complex64) case is judged at float16's (complex32's) precision.

Two declared widenings, each for a family of ops whose error model differs:
FFTs (``_fft_*``) sum over the transform's whole length in their own dtype
(cuFFT computes half-precision transforms in half precision), so ``n`` is the
input's size and ``u_acc`` the case dtype's; on CUDA, cuDNN may run a
convolution as a Winograd or FFT algorithm whose error is several times a
direct sum's, so convolutions there get ``CUDNN_FACTOR`` times the slack.

The precision reference (float64 on the CPU) uses the rule times
``PRECISION_MARGIN``.

Integer and bool results get ``atol = rtol = 0``: exact, except where a
nudge of the inputs moved the float64 result (an index at a near-tie).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..dtypes import unit_roundoff

SLACK = 8.0
SCALE_ULPS = 16.0
# The precision reference reports only errors at least this many times the
# rule's bound: the rule models rounding, not each algorithm's constants, and a
# layout or contract finding is exact where a precision one is a judgement.
PRECISION_MARGIN = 2.0
CUDNN_FACTOR = 4.0
JUMP_RATIO = 64.0
DEVICE_FACTOR = 2.0

# (atol, rtol) by dtype: torch.testing's defaults.
TABLE: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-5, 1e-3),
    torch.bfloat16: (1e-5, 1.6e-2),
    torch.float32: (1e-5, 1.3e-6),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-5, 1e-3),
    torch.complex64: (1e-5, 1.3e-6),
    torch.complex128: (1e-7, 1e-7),
}


@dataclass(frozen=True, slots=True)
class Tolerance:
    atol: float
    rtol: float


def table(dtype: torch.dtype, override: tuple[float, float] | None = None) -> Tolerance:
    atol, rtol = TABLE.get(dtype, (0.0, 0.0))
    if override is not None and (dtype.is_floating_point or dtype.is_complex):
        atol, rtol = max(atol, override[0]), max(rtol, override[1])
    return Tolerance(atol=atol, rtol=rtol)


CONVOLUTIONS = frozenset({"convolution", "_convolution", "cudnn_convolution", "cudnn_convolution_transpose", "convolution_backward",
                          "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"})
_MATMULS = frozenset({"mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "addmv", "mv", "linear", "_addmm_activation"})


def effective_dtype(dtype: torch.dtype, device: str, op_names) -> torch.dtype:
    """The precision a case in ``dtype`` is really computed at: float16's for TF32 work."""
    if not device.startswith("cuda") or dtype not in (torch.float32, torch.complex64):
        return dtype
    names = set(op_names)
    tf32 = (names & CONVOLUTIONS and torch.backends.cudnn.allow_tf32) or (
        names & _MATMULS and (torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest")
    )
    if not tf32:
        return dtype
    return torch.float16 if dtype == torch.float32 else torch.complex32


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The type PyTorch's kernels accumulate ``dtype`` in (``at::acc_type`` on the CPU)."""
    return {
        torch.float16: torch.float32,
        torch.bfloat16: torch.float32,
        torch.complex32: torch.complex64,
    }.get(dtype, dtype)


def scan_slack(dtype: torch.dtype, length: int) -> float:
    """The scans' term's factor in front of ``|e_i|`` for a case in ``dtype`` scanning ``length`` entries (the rule)."""
    return SLACK * math.sqrt(max(length, 1)) * unit_roundoff(accumulation_dtype(dtype))


def slack_factor(dtype: torch.dtype, reduction_length: int, steps: int = 1, *, accumulation: torch.dtype | None = None) -> float:
    """The factor in front of ``k_i`` for a case in ``dtype`` (see the rule above)."""
    u = unit_roundoff(dtype)
    base = SLACK * math.sqrt(max(steps, 1))
    if u == 0.0:
        return base
    u_acc = unit_roundoff(accumulation or accumulation_dtype(dtype))
    return base * (1.0 + math.sqrt(max(reduction_length, 1)) * u_acc / u)
