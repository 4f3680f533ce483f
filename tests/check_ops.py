"""Ops for the torchsleuth.check tests: custom ops with a stride bug and their correct twins, one whose batching rule is
wrong, and a Triton-like callable.

A module of its own (not a test module): repro scripts import it by path to get the same ops. No ``from __future__
import annotations``: torch 2.4's custom_op reads the annotations as types, not strings.
"""

import torch


def _as_if_contiguous(x: torch.Tensor) -> torch.Tensor:
    """``x``'s memory read as if it were laid out contiguously: what a kernel handed only a data pointer does."""
    return torch.as_strided(x, (x.numel(),), (1,), x.storage_offset()).reshape(x.shape)


@torch.library.custom_op("tsl_check::scale_bad", mutates_args=())
def scale_bad(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """``x * alpha``, wrong for a non-contiguous ``x``: it ignores the strides."""
    return (_as_if_contiguous(x) * alpha).clone()


@torch.library.custom_op("tsl_check::scale_good", mutates_args=())
def scale_good(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * alpha


def gelu_kernel(x: torch.Tensor) -> torch.Tensor:
    """A Triton-like launcher: sigmoid-approximated gelu over ``x``'s memory as if contiguous."""
    flat = _as_if_contiguous(x)
    return flat * torch.sigmoid(1.702 * flat)


def gelu_eager(x: torch.Tensor) -> torch.Tensor:
    """What ``gelu_kernel`` replaces, in eager PyTorch."""
    return x * torch.sigmoid(1.702 * x)


def gelu_fused_wrong(x: torch.Tensor) -> torch.Tensor:
    """Right for every layout, wrong everywhere: the constant is off (1.5 for 1.702)."""
    return x * torch.sigmoid(1.5 * x)


@torch.library.custom_op("tsl_check::scale_batch_bad", mutates_args=())
def scale_batch_bad(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """``x * alpha``, right in every layout; its batching rule (below) is what is wrong."""
    return x * alpha


def _scale_batch_bad_rule(info, in_dims, x, alpha):
    """A batching rule that reverses the batch when its dim is not the first: each sample gets another's result."""
    dim = in_dims[0]
    result = scale_batch_bad(x.movedim(dim, 0), alpha)
    return (result.flip(0) if dim != 0 else result), 0


if hasattr(torch.library, "register_vmap"):  # a test of it skips where torch has none
    torch.library.register_vmap(scale_batch_bad, _scale_batch_bad_rule)
