"""The planted kernels: each is one aten CPU kernel, wrong in one way under one condition.

Design note. A kernel here is a plain function; importing this module
installs nothing. ``drill.plants.<class>`` modules install one each (in a
sweep worker, through ``SweepConfig.imports``) and the planted-fault tests
install them in their own process for a ``workers=0`` sweep, so the drill and
the tests plant the same faults.

A planted kernel cannot call the op it replaces (it would call itself), so
each computes the right answer through other ops and then goes wrong on its
condition only. Every other case must stay right: a drill class is caught
only when the finding names the planted condition.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import time

import torch

from ..cases.layouts import contiguous_strides

# --- right answers computed without the op being replaced ------------------------


def exact_sum(x: torch.Tensor, dims, keepdim: bool, dtype) -> torch.Tensor:
    """``x.sum(dims, keepdim, dtype=dtype)`` through cumsum in float64 (no call to aten::sum)."""
    if dtype is None:
        dtype = x.dtype if x.is_floating_point() or x.is_complex() else torch.int64
    rows, dims = _rows(x, dims)
    length = rows.shape[-1]
    wide = rows.to(torch.complex128 if x.is_complex() else torch.float64 if x.is_floating_point() else torch.int64)
    total = wide.cumsum(-1).select(-1, length - 1) if length else torch.zeros(wide.shape[:-1], dtype=wide.dtype)
    return _kept(total, dims, keepdim).to(dtype)


def sequential_sum(x: torch.Tensor, dims, keepdim: bool) -> torch.Tensor:
    """The sum along ``dims``, accumulated one slice at a time in ``x``'s own dtype."""
    rows, dims = _rows(x, dims)
    total = torch.zeros(rows.shape[:-1], dtype=x.dtype)
    for i in range(rows.shape[-1]):
        total = total + rows.select(-1, i)  # rounded to x.dtype after every addition
    return _kept(total, dims, keepdim)


def _rows(x: torch.Tensor, dims) -> tuple[torch.Tensor, list[int]]:
    """``x`` with the reduced ``dims`` (all of them when none are given) flattened into the last one."""
    n = x.dim()
    dims = sorted({d % n for d in dims}) if n and dims else list(range(n))
    kept = [d for d in range(n) if d not in dims]
    length = math.prod(x.shape[d] for d in dims)
    return x.permute(kept + dims).reshape([x.shape[d] for d in kept] + [length]), dims


def _kept(total: torch.Tensor, dims: list[int], keepdim: bool) -> torch.Tensor:
    if keepdim:
        for d in dims:
            total = total.unsqueeze(d)
    return total


def _transposed(t: torch.Tensor) -> bool:
    return t.dim() == 2 and t.stride(0) < t.stride(1)


# --- in-place: dropped write ---------------------------------------------------------


def addcmul_dropping_noncontiguous_writes(self, tensor1, tensor2, *, value=1):
    """``addcmul_`` (the seed story): nothing lands in a non-contiguous ``self``. Elsewhere it evaluates as aten's
    kernel does, ``self + value * tensor1 * tensor2`` left to right, so it overflows where that does."""
    if not self.is_contiguous():
        return self  # the bug
    return self.add_(value * tensor1 * tensor2)


def addcdiv_dropping_noncontiguous_writes(self, tensor1, tensor2, *, value=1):
    """``addcdiv_``, the seed story's other kernel (Adam's parameter update): nothing lands in a non-contiguous ``self``;
    elsewhere ``self + value * tensor1 / tensor2``, left to right, as aten's kernel."""
    if not self.is_contiguous():
        return self  # the bug
    return self.add_(value * tensor1 / tensor2)


# --- out=: strides ignored -----------------------------------------------------------


def neg_out_restriding_out(self, *, out):
    """``neg.out`` that gives ``out`` contiguous strides instead of writing through its own."""
    out.as_strided_(out.shape, contiguous_strides(out.shape))  # the bug
    return out.copy_(self * -1)


# --- functional: input mutated -------------------------------------------------------


def neg_writing_its_input(self):
    """``neg`` that doubles its input, which it should only read."""
    result = self * -1
    self.mul_(2)  # the bug
    return result


# --- determinism -----------------------------------------------------------------------

_calls = itertools.count(1)
_SAME_WIDTH_INTS = {torch.float32: torch.int32, torch.float64: torch.int64}


def neg_counting_calls(self):
    """``neg`` whose last bits count its calls: a few units of roundoff, different every call."""
    result = self * -1
    if result.dtype in _SAME_WIDTH_INTS:  # the bug
        result = (result.view(_SAME_WIDTH_INTS[result.dtype]) + next(_calls)).view(result.dtype)
    return result


# --- writes outside the view -----------------------------------------------------------


def fill_writing_past_its_view(self, value):
    """``fill_`` that also writes the element after its view, when the storage has one."""
    self.copy_(torch.tensor(value, dtype=self.dtype).expand(self.shape))  # right, through copy_
    end = self.storage_offset() + (1 + sum((n - 1) * s for n, s in zip(self.shape, self.stride())) if self.numel() else 0)
    if end < self.untyped_storage().nbytes() // self.element_size():
        self.as_strided((1,), (1,), end).copy_(torch.tensor([value], dtype=self.dtype))  # the bug
    return self


# --- layout reference: storage offset ignored -----------------------------------------


def sum_ignoring_storage_offset(self, dim, keepdim=False, *, dtype=None):
    """``sum.dim_IntList`` (which ``sum()`` reaches too) reading from the start of the storage."""
    from_storage_start = self.as_strided(self.shape, self.stride(), 0)  # the bug
    return exact_sum(from_storage_start, dim or [], keepdim, dtype)


# --- random fills: coverage -------------------------------------------------------------


def uniform_skipping_noncontiguous_elements(self, low=0.0, high=1.0, *, generator=None):
    """``uniform_`` that draws only every other element of a non-contiguous ``self``."""
    bits = torch.randint(0, 1 << 24, self.shape, generator=generator)  # through random_, not uniform_
    draws = (bits.to(torch.float64) * ((high - low) / (1 << 24)) + low).to(self.dtype)
    if self.is_contiguous():
        return self.copy_(draws)
    every_other = torch.arange(self.numel()).reshape(self.shape) % 2 == 0
    return self.copy_(torch.where(every_other, draws, self))  # the bug


# --- random draws: what the parameters allow -------------------------------------------


def bernoulli_reading_p_as_if_contiguous(self, *, generator=None):
    """``bernoulli`` that reads its probabilities (``self``) from storage in row-major order, whatever their strides."""
    p = self.as_strided(self.shape, torch.empty(self.shape).stride(), self.storage_offset())  # the bug
    return (torch.empty(self.shape, dtype=torch.float64).uniform_(generator=generator) < p).to(self.dtype)


# --- precision reference: low-precision accumulation ------------------------------------


def sum_accumulating_bfloat16_in_bfloat16(self, dim, keepdim=False, *, dtype=None):
    """``sum.dim_IntList`` without the float32 accumulator for bfloat16."""
    if self.dtype == torch.bfloat16 and dtype in (None, torch.bfloat16):
        return sequential_sum(self, dim or [], keepdim)  # the bug
    return exact_sum(self, dim or [], keepdim, dtype)


# --- gradients ----------------------------------------------------------------------------


def tanh_backward_wrong_on_noncontiguous_grad(grad_output, output):
    """``tanh_backward`` that doubles the gradient when the output gradient is not contiguous."""
    result = grad_output * (1 - output * output)
    return result if grad_output.is_contiguous() else result * 2  # the bug


# --- isolation: crash and hang (never install these in a process you need) -----------------


def neg_crashing_on_transposed(self):
    """``neg`` that kills its process (SIGSEGV) when its input is transposed."""
    if _transposed(self):
        os.kill(os.getpid(), signal.SIGSEGV)
    return self * -1


def neg_hanging_on_transposed(self):
    """``neg`` that never returns when its input is transposed."""
    while _transposed(self):
        time.sleep(1)
    return self * -1
