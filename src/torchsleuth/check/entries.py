"""The entry of an op ``check`` is handed samples for: OpInfo-like, so the pipeline cannot tell it from a catalog op.

Design note. Every stage reads an op through a few attributes of its OpInfo
entry (``cases.opinfo``); an op the user brings (a custom op, an aten
overload, a plain Python callable such as a Triton kernel's launcher) gets
the same attributes here, from the samples the user gave: an iterable of
calls (a ``SampleInput``-like object, an ``(args, kwargs)`` pair as
``torch.library.opcheck`` takes them, a tuple of positional arguments, or one
tensor), or a function ``samples(dtype, device)`` that makes them. Given
samples are held as they came (on the CPU) and cast, their floating tensors
only, to each dtype the check asks for; a dtype in which the op raises on
every sample is not supported (the probe below), as OpInfo would not declare
it. ``reference`` is the user's trusted implementation: the precision
reference (float64) calls it in place of the op (``run.references``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

from ..run import tree


@dataclass
class Given:
    """One call: ``op(input, *args, **kwargs)`` (OpInfo's SampleInput, as the adapter reads it)."""

    input: Any
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


def given(sample: Any) -> Given:
    """A sample as the user wrote it (SampleInput-like, an ``(args, kwargs)`` pair, a tuple of positional arguments,
    one tensor) as a ``Given``."""
    if hasattr(sample, "input") and hasattr(sample, "args"):
        return Given(sample.input, tuple(sample.args), dict(getattr(sample, "kwargs", {}) or {}))
    if _pair(sample):  # (args, kwargs): the form torch.library.opcheck takes
        args, kwargs = sample
        if not args:
            raise TypeError("an (args, kwargs) sample with no positional argument: the op's first argument goes in args")
        return Given(args[0], tuple(args[1:]), dict(kwargs))
    if isinstance(sample, (tuple, list)):
        if not sample:
            raise TypeError("an empty sample: give the op's positional arguments as a tuple")
        return Given(sample[0], tuple(sample[1:]))
    return Given(sample)


def _pair(sample: Any) -> bool:
    """Whether ``sample`` is ``(args, kwargs)``: a tuple or list of two, a tuple or list of arguments and a dict of
    keywords. A call whose own first argument is a tuple and second a dict reads the same; wrap it as ((t, d), {})."""
    return (isinstance(sample, (tuple, list)) and len(sample) == 2 and isinstance(sample[0], (tuple, list))
            and isinstance(sample[1], dict))


class GivenOp:
    """An op with the user's samples, read by the pipeline as an OpInfo entry is."""

    variant_test_name = ""
    decorators = ()
    method_variant = None
    inplace_variant = None
    supports_out = False

    def __init__(self, name: str, op: Callable, samples: Iterable | Callable, *, dtypes: tuple[torch.dtype, ...] | None = None,
                 reference: Callable | None = None, public: str = ""):
        self.name, self.op, self.reference, self.public = name, op, reference, public
        self._make = samples if callable(samples) and not isinstance(samples, torch.Tensor) else None
        self._given = None if self._make else [given(s) for s in samples]
        if self._given is not None and not self._given:
            raise ValueError("samples= is empty: give at least one call of the op")
        wanted = tuple(dtypes) if dtypes else (_given_dtypes(self._given) if self._given is not None else _DEFAULT)
        self._dtypes = tuple(d for d in wanted if self._works(d))
        self._backward = tuple(d for d in self._dtypes if (d.is_floating_point or d.is_complex) and self._differentiable(d))
        self.supports_autograd = bool(self._backward)

    def supported_dtypes(self, device_type: str) -> set[torch.dtype]:
        return set(self._dtypes)

    def supported_backward_dtypes(self, device_type: str) -> set[torch.dtype]:
        return set(self._backward)

    def sample_inputs(self, device, dtype: torch.dtype, requires_grad: bool = False) -> list[Given]:
        """The calls in ``dtype``, on the CPU: the factory's, or the given ones with their floating tensors cast."""
        if self._make is not None:
            return [given(s) for s in self._make(dtype, "cpu")]
        return [_cast(s, dtype) for s in self._given if _castable(_dtype_of(s), dtype)]

    def _works(self, dtype: torch.dtype) -> bool:
        """Whether the op takes one of its samples in ``dtype`` without raising (the probe OpInfo's declaration stands for)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                samples = self.sample_inputs("cpu", dtype)
            except Exception:
                return False
            for sample in samples[:3]:
                try:
                    self.op(sample.input, *sample.args, **sample.kwargs)
                    return True
                except Exception:
                    continue
        return False

    def _differentiable(self, dtype: torch.dtype) -> bool:
        """Whether a result has a ``grad_fn`` when the floating inputs of the first working sample require grad."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for sample in self.sample_inputs("cpu", dtype)[:3]:
                sample = tree.map_sample_tensors(sample, lambda _, t: t.detach().clone().requires_grad_(t.is_floating_point() or t.is_complex()))
                try:
                    result = self.op(sample.input, *sample.args, **sample.kwargs)
                except Exception:
                    continue
                return any(t.grad_fn is not None for _, t in tree.leaves(result, "out"))
        return False


_DEFAULT = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _dtype_of(sample: Given) -> torch.dtype | None:
    """The sample's dtype: its first floating (or complex) tensor's, else its first tensor's."""
    leaves = list(tree.sample_tensors(sample).values())
    chosen = [t for t in leaves if t.is_floating_point() or t.is_complex()] or leaves
    return chosen[0].dtype if chosen else None


def _given_dtypes(samples: list[Given]) -> tuple[torch.dtype, ...]:
    return tuple(dict.fromkeys(d for d in map(_dtype_of, samples) if d is not None))


def _castable(have: torch.dtype | None, want: torch.dtype) -> bool:
    """Whether a sample of dtype ``have`` serves a unit of ``want``: the same, or both floating (cast)."""
    return have == want or (have is not None and have.is_floating_point and want.is_floating_point)


def _cast(sample: Given, dtype: torch.dtype) -> Given:
    """A copy on the CPU, floating tensors in ``dtype`` (complex ones stay: a real dtype has no complex twin to take)."""
    def cast(_, t: torch.Tensor) -> torch.Tensor:
        return (t.detach().to("cpu", dtype) if t.is_floating_point() and dtype.is_floating_point else t.detach().to("cpu")).clone()

    return tree.map_sample_tensors(sample, cast)
