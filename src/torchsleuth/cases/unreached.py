"""The overloads of an op's packets its samples never reach, swept from their schema in a pointed run.

Design note. An OpInfo entry's samples call one or two of its packet's
overloads; the others have kernels of their own that nothing in the entry
calls: ``torch.norm`` goes to ``linalg_vector_norm`` and never calls
``aten.norm.ScalarOpt_dim``; ``isin``'s samples pass two tensors, never a
number (``isin.Tensor_Scalar``, whose argument names differ from
``isin.Tensor_Tensor``'s, so the ``overloads`` search has no slot for it);
``fill``'s pass a number, never a 0-dim tensor (``fill.Tensor``);
``squeeze_copy``'s one dim, never a list (``squeeze_copy.dims``). Each such
overload can be swept as an op of its own, with samples made from its schema
(``cases.schema``); a glob over aten leaves them out, as their packet has an
entry (``select.covered_by_opinfo``), so without this nothing calls them.

``unreached(name)`` is those overloads of one entry: the functional and
in-place overloads of the op's own packets (not its backward's: the backward
variant reaches that) that are schema entries (``schema.why_not`` is empty:
not random, not out=, a CPU kernel, ...), less the ones a traced call of the
entry's first samples named (functional and in-place, in the dtype its
in-place and out= siblings are probed in, ``opinfo.probe_dtype``), and less those the ``overloads`` search
reaches by a Python number where the samples pass a tensor
(``reach.number_slots``). A ``CompositeImplicitAutograd`` overload is kept:
no trace names it, and called by name it runs its own decomposition
(``argsort.stable``'s ``stable=True``).

Only a pointed run adds them (``sweep.depth``), where the user asks about
these ops and a few hundred cases more are the point; a catalog run keeps its
budget, and its coverage names them ("no sample reaches it"). The trace runs
the samples on the CPU in this process, once per entry (cached): a pointed run
makes those samples anyway, to probe its dtypes.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import opinfo, reach, schema

# Samples traced per variant: the overloads a sample reaches are few, and the first samples reach them.
TRACED = 8


def unreached(name: str) -> tuple[str, ...]:
    """The overloads of catalog op ``name``'s packets no sample of it reaches and the schema sweep takes, in packet
    order ("aten.norm.ScalarOpt_dim", ...); () for an op swept from its schema, or one without packets."""
    entry = opinfo.catalog().get(name)
    candidates = _candidates(name)
    if entry is None or not candidates:
        return ()
    by_number = set() if reach.random(entry) else {o for found in reach.number_slots(entry).values() for o in found}
    by_number |= {sibling for o in by_number if (sibling := reach.sibling(o, "inplace")) is not None}
    reached = _traced(name)
    return tuple(o for o in candidates if o not in reached and o not in by_number and not schema.why_not(o))


def added(ops: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Catalog op -> the overloads among ``ops`` that ``unreached`` added for it (for the run's note). Only the ops
    with such an overload among ``ops`` are traced: a catalog run's hundreds are not."""
    chosen = set(ops)
    found = {name: tuple(o for o in unreached(name) if o in chosen) for name in ops if chosen.intersection(_candidates(name))}
    return {name: overloads for name, overloads in found.items() if overloads}


def _candidates(name: str) -> tuple[str, ...]:
    """The functional and in-place overloads of catalog op ``name``'s own packets (not its backward's)."""
    entry = opinfo.catalog().get(name)
    if entry is None:
        return ()
    own = [p for p in reach.packets(entry) if p != getattr(entry, "aten_backward_name", None)]
    return tuple(o for p in own for o in reach.overloads(p) if not reach.is_out(o))


def with_unreached(ops: tuple[str, ...]) -> tuple[str, ...]:
    """``ops`` and, after them, every overload ``unreached`` names for one of them (each once). Their entries are made
    now, so that their candidate calls are probed together, in one child process (``cases.schema``), not one each."""
    extra = [o for o in dict.fromkeys(o for name in ops for o in unreached(name)) if o not in ops]
    for name in extra:
        schema.for_name(name)
    return (*ops, *extra)


class _Names(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(str(func))
        return func(*args, **(kwargs or {}))


@functools.cache
def _traced(name: str) -> frozenset[str]:
    """The aten overloads the first ``TRACED`` samples of catalog op ``name`` reach, functional and in-place."""
    entry = opinfo.get(name)
    dtype = opinfo.probe_dtype(entry)
    if dtype is None:
        return frozenset()
    functions = {variant: f for variant, f in opinfo.functions(entry).items() if variant in ("functional", "inplace")}
    mode = _Names()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            made = opinfo.samples(entry, dtype)[:TRACED]
        except Exception:  # samples OpInfo cannot make here: nothing is known to be reached, so nothing is left out
            return frozenset()
        for sample in made:
            for variant, function in functions.items():
                first = sample.input.clone() if variant == "inplace" and isinstance(sample.input, torch.Tensor) else sample.input
                try:
                    with mode:
                        function(first, *sample.args, **sample.kwargs)
                except Exception:  # a sample a variant refuses reaches nothing
                    continue
    return frozenset(mode.names)
