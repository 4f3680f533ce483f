"""Which aten ops a call dispatched to, and which tensors they declared they write.

A ``TorchDispatchMode`` sees each call after composite ops have decomposed, as
the kernels receive it. Tracing is never done on the call being judged: a
Python dispatch mode can change what an op computes (``torch.linalg.pinv`` on
complex input returns a different matrix under any mode in torch 2.13), so
the trace is taken on a separate run of the same call. From the schema of each overload it learns which
arguments are mutable (``Tensor(a!)``), so that an op that writes an argument
by contract (batch norm's running stats, an in-place self) is told apart
from one that writes an input it should only read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .unordered import bound_arguments, repeats

# Ops that move or describe data without computing: never the "op" of a finding.
PLUMBING = frozenset(
    {
        "detach",
        "alias",
        "view",
        "_unsafe_view",
        "reshape",
        "expand",
        "clone",
        "contiguous",
        "copy_",
        "_to_copy",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "lift_fresh",
        "lift_fresh_copy",
        "t",
        "transpose",
        "permute",
        "squeeze",
        "unsqueeze",
        "select",
        "slice",
        "as_strided",
        "resize_",
        "zeros_like",
        "zero_",
        "fill_",
        "_local_scalar_dense",
        "is_same_size",
        "resolve_conj",
        "resolve_neg",
    }
)


# Ops that write an argument their schema does not mark as written (declared,
# one entry each, with the argument positions). native_batch_norm updates
# running_mean and running_var in training mode; its schema predates alias
# annotations for that (PyTorch's _native_batch_norm_legit states them).
UNDECLARED_WRITES = {"aten::native_batch_norm": (3, 4), "aten::cudnn_batch_norm": (3, 4), "aten::miopen_batch_norm": (3, 4)}


@dataclass
class Trace:
    ops: list = field(default_factory=list)  # OpOverload, in call order
    written: set = field(default_factory=set)  # data_ptr of every storage a schema says is written
    repeated_writes: bool = False  # an op wrote one element twice through its indices, in no specified order (run.unordered)
    # (overload, schema name -> argument, schema name -> sample path) of each op that draws random numbers, its tensors
    # copied to the CPU before the call, and which of them is a tensor of the sample as it is: what judge.draws reads
    # the parameters of a draw from, and what a repro script calls the overload with
    draws: list = field(default_factory=list)

    def names(self) -> list[str]:
        return [str(op) for op in self.ops]

    def has_tag(self, tag) -> bool:
        return any(tag in op.tags for op in self.ops)

    def primary(self) -> str:
        """The op a finding is named after: the last one that computes something."""
        for op in reversed(self.ops):
            if op._schema.name.split("::")[-1] not in PLUMBING:
                return _display(op)
        return _display(self.ops[-1]) if self.ops else ""


def _display(op) -> str:
    # torch prints "aten.addcmul_.default"; keep that form.
    return str(op)


class Tracer(TorchDispatchMode):
    def __init__(self, tensors: dict | None = None):
        """``tensors``: the call's tensors by sample path, to tell which a random op is given as it is."""
        super().__init__()
        self.trace = Trace()
        self._paths = {_key(t): path for path, t in (tensors or {}).items() if isinstance(t, torch.Tensor)}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.trace.ops.append(func)
        if not self.trace.repeated_writes:
            self.trace.repeated_writes = repeats(func, args, kwargs)
        schema = func._schema
        if torch.Tag.nondeterministic_seeded in func.tags:
            bound = bound_arguments(func, args, kwargs)
            sources = {name: self._paths[_key(t)] for name, t in bound.items() if isinstance(t, torch.Tensor) and _key(t) in self._paths}
            self.trace.draws.append((_display(func), {n: _copy(v) for n, v in bound.items()}, sources))
        undeclared = UNDECLARED_WRITES.get(schema.name, ())
        for position, argument in enumerate(schema.arguments):
            alias = argument.alias_info
            if position not in undeclared and (alias is None or not alias.is_write):
                continue
            value = args[position] if position < len(args) else kwargs.get(argument.name)
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor):
                    self.trace.written.add(t.untyped_storage().data_ptr())
        return func(*args, **kwargs)


def _copy(value):
    """A tensor copied to the CPU (an in-place draw overwrites its self); anything else as it is."""
    return value.detach().to("cpu", copy=True) if isinstance(value, torch.Tensor) else value


def _key(t: torch.Tensor) -> tuple:
    """A tensor as one view of one storage: the same key is the same tensor, values and layout."""
    try:
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype) if t.layout == torch.strided else (id(t),)
    except RuntimeError:  # a tensor without storage
        return (id(t),)
