"""Random ops on DTensors under one seed: what DTensor promises on a CPU mesh, and an oracle that holds it to that.

Design note. The promise, read from torch 2.13's ``torch/distributed/tensor/_random.py``
and ``_dispatch.py`` and then tested (bench/shard.md, "DTensor surface"):

* DTensor's RNG tracker (``OffsetBasedRNGTracker``: each shard drawn at its
  own offset of one Philox stream, every rank's offset moved on by the whole
  tensor's numel afterwards) exists only for CUDA-like meshes:
  ``is_rng_supported_mesh`` is False on a CPU mesh (``torch.cpu`` has no
  ``set_rng_state``) and the tracker refuses a CPU device. On a CPU mesh a
  random op runs on each rank's local tensor with that rank's own default
  generator. ``manual_seed``'s docstring: "Current implementation only
  supports a GPU device mesh".
* Measured, simulated (LocalTensorMode gives each rank its own generator
  state) and on gloo alike, after ``torch.manual_seed(s)`` on every rank:
  with every argument replicated the result is bitwise the plain op's under
  the same seed; sharded, it is not (each shard holds the first values of
  the stream: every shard the same values); each rank's generator then
  stands where its own shard's draw left it, so after a draw on an uneven
  shard the ranks' generators disagree (bench/shard.md, family F).
* On CUDA (torch 2.11, LocalTensorMode over a cuda mesh, which runs the
  tracker): replicated, bitwise the plain op's; sharded, neither the plain
  op's nor the replicated one's, the shards distinct; the ranks' generators
  in step after an uneven draw.

So DTensor promises placement-independent values only for replicated
arguments, nowhere the same full tensor whatever the placement, and on the
CPU no shard-to-shard relation at all. What is judged,
per output of a random chain (each chain seeds first, in its own source, so
that a repro script carries the seed):

1. metadata: shape and dtype as the plain op's;
2. replicas: every rank's ``full_tensor()`` bitwise equal (a claimed
   Replicate, or a Shard all ranks gather the same, must hold one value);
3. distribution: every element inside the law's support (the in-place
   draws start from NaN, so an element never written is outside it), unless
   the plain op itself is not (then it is torch's matter, not sharding's);
4. seeded values: the chain's first draw, when the tensor it draws on is
   replicated, bitwise equal to the plain op's under the same seed (on CUDA
   the tracker moves the offset on by the rounded numel, not as the kernel
   does, so later draws are not held to it);
5. plausibility: the mean of the law's statistic within 6 standard errors,
   counting ``numel / ranks`` independent elements (shards may repeat).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..judge import compare as cmp
from ..judge.records import Mismatch
from ..judge.tolerance import table

# name -> (source, (law, the argument drawn on) of each output in order). Each source seeds first: ``manual_seed``
# returns the generator, which is true, so ``and`` goes on to the draws.
CHAINS = {
    "uniform_": ("lambda x: torch.manual_seed(7) and x.uniform_()", (("unit", "x"),)),
    "normal_": ("lambda x: torch.manual_seed(7) and x.normal_()", (("normal", "x"),)),
    "bernoulli_": ("lambda x: torch.manual_seed(7) and x.bernoulli_(0.5)", (("bernoulli", "x"),)),
    "exponential_": ("lambda x: torch.manual_seed(7) and x.exponential_()", (("exponential", "x"),)),
    "dropout": ("lambda x: torch.manual_seed(7) and torch.nn.functional.dropout(x, 0.5)", (("dropout", "x"),)),
    "rand_like": ("lambda x: torch.manual_seed(7) and torch.rand_like(x)", (("unit", "x"),)),
    "randn_like": ("lambda x: torch.manual_seed(7) and torch.randn_like(x)", (("normal", "x"),)),
    # a draw on y first: with y replicated (x placed alone) it is the plain op's, bitwise
    "rand_like_then_uniform_": ("lambda x, y: torch.manual_seed(7) and (torch.rand_like(y), x.uniform_())",
                                (("unit", "y"), ("unit", "x"))),
    # a draw on x, then on y: y replicated, its draw must be one value on every rank, whatever x's draw did
    "uniform_then_rand_like": ("lambda x, y: torch.manual_seed(7) and (x.uniform_(), torch.rand_like(y))",
                               (("unit", "x"), ("unit", "y"))),
}
# chains that draw into x in place: x starts as NaN, so an element never written is outside every law
NAN_INPUT = frozenset({"uniform_", "normal_", "bernoulli_", "exponential_", "rand_like_then_uniform_", "uniform_then_rand_like"})
# the argument paths of a chain's parameters (run.tree's names: the first argument is "input")
PATHS = {"x": "input", "y": "args[0]"}
SIGMAS = 6.0
MIN_INDEPENDENT = 16  # fewer independent elements than this: no plausibility check


@dataclass(frozen=True, kw_only=True, slots=True)
class Law:
    """What one draw's values must be: its support, and a statistic with a known mean and deviation."""

    support: str  # in words
    inside: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (values, x) -> bool per element
    statistic: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    mean: float
    sd: float


def _kept(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """0, or 2x within a few units of roundoff of the values' scale (a Partial x is reduced before it is dropped)."""
    twice = 2 * x.to(torch.float64)
    allowed = 8 * torch.finfo(v.dtype).eps * (twice.abs() + twice.abs().max())
    return (v == 0) | ((v.to(torch.float64) - twice).abs() <= allowed)


LAWS = {
    "unit": Law(support="in [0, 1)", inside=lambda v, x: (v >= 0) & (v < 1), statistic=lambda v, x: v, mean=0.5, sd=12 ** -0.5),
    "normal": Law(support="finite", inside=lambda v, x: v.isfinite(), statistic=lambda v, x: v, mean=0.0, sd=1.0),
    "bernoulli": Law(support="0 or 1", inside=lambda v, x: (v == 0) | (v == 1), statistic=lambda v, x: v, mean=0.5, sd=0.5),
    "exponential": Law(support="finite and >= 0", inside=lambda v, x: v.isfinite() & (v >= 0), statistic=lambda v, x: v,
                       mean=1.0, sd=1.0),
    "dropout": Law(support="0 or 2*x (dropped, or kept and scaled by 1/(1-p))", inside=_kept,
                   statistic=lambda v, x: (v == 0).to(torch.float64), mean=0.5, sd=0.5),
}


def draws(name: str) -> tuple[tuple[str, str], ...]:
    return CHAINS[name][1]


def mismatches(name: str, ran, x: torch.Tensor, *, placed: set[str], ranks: int) -> list[tuple[list[int], Mismatch]]:
    """For each output of random chain ``name`` that breaks the promise: the ranks it breaks it on and how (design note).

    ``ran`` is run.py's record (the plain values under the seed, and every
    visible rank's ``full_tensor()``); ``x`` the chain's first argument;
    ``placed``: the paths of the arguments not replicated.
    """
    outputs = draws(name)
    paths = ["out"] if len(outputs) == 1 else [f"out[{i}]" for i in range(len(outputs))]
    found = []
    for index, (path, (law_name, argument)) in enumerate(zip(paths, outputs)):
        replicated = index == 0 and PATHS[argument] not in placed  # the first draw, on a replicated argument
        expected, values = ran.expected.get(path), ran.actual.get(path)
        if not isinstance(expected, torch.Tensor) or not values:
            found.append(([], Mismatch(path=path, attribute="structure", expected="a tensor", actual=type(values).__name__)))
            continue
        for check in (_metadata, _replicas, _support, _seeded, _plausible):
            wrong = check(path, LAWS[law_name], expected, values, x, replicated=replicated, ranks=ranks)
            if wrong is not None:
                found.append(wrong)
                break
    return found


def _metadata(path, law, expected, values, x, **_):
    for rank, value in enumerate(values):
        wrong = cmp.compare_leaf(path, torch.zeros_like(value), torch.zeros_like(expected), tolerance=table)
        if wrong is not None:
            return [rank], wrong
    return None


def _replicas(path, law, expected, values, x, **_):
    bad, worst = [], None
    for rank, value in enumerate(values[1:], start=1):
        wrong = cmp.compare_leaf(path, value, values[0], tolerance=table, bitwise=True)
        if wrong is not None:
            bad.append(rank)
            worst = worst or wrong
    if not bad:
        return None
    return bad, Mismatch(path=path, attribute="replicas", expected="every rank's full_tensor() the same",
                         actual=f"rank {bad[0]} differs from rank 0 at {worst.mismatched} of {worst.numel} elements "
                                f"(at {list(worst.worst_index)}: {worst.actual} against {worst.expected})",
                         mismatched=worst.mismatched, numel=worst.numel, worst_index=worst.worst_index)


def _support(path, law, expected, values, x, **_):
    if not bool(law.inside(expected, x).all()):
        return None  # the plain op is outside its own law: not a sharding matter
    bad, worst = [], None
    for rank, value in enumerate(values):
        outside = ~law.inside(value, x)
        if bool(outside.any()):
            bad.append(rank)
            if worst is None:
                flat = int(outside.reshape(-1).to(torch.uint8).argmax())
                index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), value.shape)) if value.dim() else ()
                worst = Mismatch(path=path, attribute="distribution", expected=f"every value {law.support}",
                                 actual=f"{int(outside.sum())} of {value.numel()} outside it, e.g. "
                                        f"{value.reshape(-1)[flat].item():.6g} at {list(index)}",
                                 mismatched=int(outside.sum()), numel=value.numel(), worst_index=index)
    return (bad, worst) if bad else None


def _seeded(path, law, expected, values, x, *, replicated, **_):
    if not replicated:
        return None
    bad, worst = [], None
    for rank, value in enumerate(values):
        wrong = cmp.compare_leaf(path, value, expected, tolerance=table, bitwise=True)
        if wrong is not None:
            bad.append(rank)
            worst = worst or Mismatch(path=path, attribute="seeded values",
                                      expected="the plain op's values under the same seed (every argument replicated)",
                                      actual=f"{wrong.mismatched} of {wrong.numel} differ (at {list(wrong.worst_index)}: "
                                             f"{wrong.actual} against {wrong.expected})",
                                      mismatched=wrong.mismatched, numel=wrong.numel, worst_index=wrong.worst_index)
    return (bad, worst) if bad else None


def _plausible(path, law, expected, values, x, *, ranks, **_):
    value = values[0]
    independent = value.numel() // max(ranks, 1)
    if independent < MIN_INDEPENDENT:
        return None
    mean = float(law.statistic(value, x).to(torch.float64).mean())
    allowed = SIGMAS * law.sd / independent ** 0.5
    if abs(mean - law.mean) <= allowed:
        return None
    return [0], Mismatch(path=path, attribute="distribution", expected=f"a mean of {law.mean:.3g} +- {allowed:.3g}",
                         actual=f"{mean:.6g} over {value.numel()} values")
