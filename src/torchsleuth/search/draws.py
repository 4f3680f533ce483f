"""The ``draws`` search: a random op's parameter tensors at values that leave little or nothing to chance.

Design note. A random op is judged against what its own parameters allow
(``judge.draws``), and that is sharp only where they leave little to chance:
``bernoulli`` must draw 0 where ``p`` is 0 and 1 where it is 1, ``normal``
must draw ``mean`` itself where ``std`` is 0, ``multinomial`` must never
draw a category of probability 0. OpInfo's samples hold probabilities and
deviations drawn uniformly from an open range, so a kernel that reads its
parameters through the wrong strides draws values they allow just as well.

This search plans, for a random op's functional, in-place and out= calls,
one case per sample: each parameter tensor given a set below by what it is to
the kernel (its schema name, found by tracing the sample's call on the CPU:
whatever wrapper OpInfo calls through, ``torch.normal``'s ``std`` is the
same), each set a cycle of 7 values, like the ``values`` search's, so a
misread element meets another value. The case is tried under every layout
of the sweep at once (``cases.plan.jointly``): its point is the parameter
tensors laid out as the kernel rarely sees them (an out= case too, whose
planned cases lay out only ``out``). The edit is
``draw:PATH=SET``.

The overloads search leaves random ops alone, so the overloads that take a
parameter as a number (``normal.float_Tensor``, ``normal.Tensor_float``:
kernels of their own) are reached here: for a functional call with two or
more parameter tensors, one more case per parameter some overload takes as
a number, that tensor made a number after it
took its set (``scalar:PATH``: the set's first value, ``std`` 0 or ``mean``
-1000), the others laid out every way.
"""

from __future__ import annotations

import warnings

import torch

from ..cases import opinfo, reach
from ..cases.plan import jointly
from ..errors import UsageError
from ..run import tree
from ..run.trace import Tracer
from . import overloads, values
from .registry import Search

DESCRIPTION = ("a random op's parameters at values that decide the draw (p of 0 and 1, std of 0, categories of probability 0), "
               "laid out every way")
VERB = "draw"
FORM = "draw:PATH=SET"

VARIANTS = ("functional", "inplace", "out")
# Each a cycle of 7 values every floating dtype holds exactly.
SETS = {
    "probability": (0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0),  # bernoulli's p: every draw decided
    "mean": (-1000.0, 0.0, 3.5, 1000.0, -7.0, 250.0, 42.0),  # far apart: a mean read from elsewhere is far off
    "deviation": (0.0, 0.0, 0.5, 0.0, 0.0, 2.0, 0.0),  # std 0: the draw is mean itself
    "weights": (0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.5),  # categories of probability 0, and any 3 in a row hold one that is not
    "counts": (0.0, 3.0, 7.0, 1.0, 12.0, 5.0, 2.0),  # binomial's count, whole numbers
}
# (packet, schema argument) -> set: the arguments a draw is made from.
ROLES = {
    ("normal", "mean"): "mean",
    ("normal", "std"): "deviation",
    ("bernoulli", "self"): "probability",  # bernoulli(p): self is p
    ("bernoulli", "p"): "probability",
    ("multinomial", "self"): "weights",
    ("poisson", "self"): "deviation",  # rate 0: the draw is 0
    ("binomial", "count"): "counts",
    ("binomial", "prob"): "probability",
}


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """Every parameter tensor of the sample's draw at its set; then, for each parameter some overload of the op takes
    as a number (``normal.Tensor_float``'s ``std``), the same with that parameter a number: its set's first value."""
    if variant not in VARIANTS or values.op_kind(op) != "random" or not getattr(torch, dtype).is_floating_point:
        return []
    packet, roles = _roles(op, sample)
    if not roles:
        return []
    edits = tuple(f"{VERB}:{path}={name}" for path, (_, name) in sorted(roles.items()))
    slots = reach.any_number_slots(packet) if variant == "functional" and len(roles) > 1 else frozenset()
    numbers = [f"{overloads.VERB}:{path}" for path, (argument, _) in sorted(roles.items()) if argument in slots]
    return [edits, *((*edits, number) for number in numbers)]


def _roles(op: str, sample) -> tuple[str, dict[str, tuple[str, str]]]:
    """The packet of the sample's first draw (traced on the CPU), and sample path -> (schema name, set) for the tensors
    it takes as a parameter."""
    tensors = {path: t for path, t in tree.sample_tensors(sample).items() if t.is_floating_point() and t.numel() and t.device.type == "cpu"}
    tracer = Tracer(tensors)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with tracer:
                opinfo.functions(opinfo.get(op))["functional"](sample.input, *sample.args, **sample.kwargs)
        except Exception:  # a sample the op refuses draws nothing
            return "", {}
    if not tracer.trace.draws:
        return "", {}
    drawn, _, sources = tracer.trace.draws[0]
    packet = drawn.split(".")[1]
    return packet, {path: (name, ROLES[packet.rstrip("_"), name]) for name, path in sources.items() if (packet.rstrip("_"), name) in ROLES}


def apply(sample, rest: str, *, op: str = ""):
    """``sample`` with the edit ``draw:REST`` made: tensor PATH holds set SET's values in a cycle."""
    target, _, name = rest.rpartition("=")
    found = tree.sample_tensors(sample)
    if target not in found:
        raise UsageError(f"no tensor {target!r} in the sample for {VERB}:{rest}; its tensors: {', '.join(found) or 'none'}")
    if name not in SETS:
        raise UsageError(f"unknown draw set {name!r} in {VERB}:{rest}; allowed: {', '.join(SETS)}")
    if not found[target].is_floating_point():
        raise UsageError(f"{VERB}:{rest} gives a {found[target].dtype} tensor a floating set; the sets are for floating tensors")
    return tree.map_sample_tensors(sample, lambda path, t: _filled(t, name) if path == target else t)


def _filled(t: torch.Tensor, name: str) -> torch.Tensor:
    index = torch.arange(t.numel()) % len(SETS[name])
    return torch.tensor(SETS[name], dtype=torch.float64)[index].to(t.dtype).reshape(t.shape).to(t.device)


def assignments(op: str, edits: tuple[str, ...], sample, layouts: tuple[str, ...]):
    """Every layout at once on the sample's tensors, for a case of this search; None for any other case."""
    if not any(e.startswith(VERB + ":") for e in edits):
        return None
    for edit in edits:  # a parameter made a number is no tensor to lay out
        if edit.startswith(overloads.VERB + ":"):
            sample = overloads.apply(sample, edit.partition(":")[2])
    return jointly(tree.sample_tensors(sample), layouts)


SEARCH = Search(name="draws", description=DESCRIPTION, edits="a random op's parameter tensors (or numbers)", order=60, plan=plan, verb=VERB,
                form=FORM, apply=apply, layouts=assignments)
