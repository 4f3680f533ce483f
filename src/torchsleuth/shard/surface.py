"""DTensor's surface beyond the functional op: in place, in-place views, Python scalars, numbers, factories, randomness.

Design note. Users reach DTensor through more than functional ops: they
mutate (``x.mul_(2.5)``, ``x[1:].mul_(2)``, ``x.t_()``), read Python values
(``loss.item()``, ``float(x.sum())``), mix in numbers and 0-d tensors
(``x / x.sum()``), make tensors like theirs (``zeros_like``) and draw random
numbers. Each chain here is one op of the shard catalog, named
``surface.<chain>``, written as source (as composites.py's chains are) so a
repro script carries the very same code. Its arguments are named for what
they are: ``x`` (the tensor the chain is about), ``y`` (a second tensor,
placed on its own, so its placement is varied too) and ``mask`` (a bool
tensor). Samples: seeded, 2-D, one shape whose dims divide by every default
mesh and one whose do not.

Kinds, and how each is judged (all by run.py and judge.py's oracle: every
rank's ``full_tensor()`` of every result against the plain call):

* ``inplace`` and ``view`` (in-place view ops): a chain returns the mutated
  tensor, so ``self`` is judged, and where the op's return and ``self`` can
  differ (an op on a view of x), both; a view chain also returns a later op
  on the result (a spec the op did not update shows there). Forward only.
  Each argument gets fresh storage first, its placements kept (a DTensor's
  ``clone()`` would replicate a Partial one): on real process groups a
  Replicate or Shard(0) local tensor shares storage with the sample it was
  distributed from, which an in-place op would change for later cases.
* ``scalar``: a Python number read from a DTensor, returned as it is read.
  run.py judges it as a 0-d tensor of the case's dtype (bool and int as
  themselves), so the judge's rounding allowance applies to
  ``float(x.sum())`` as to a sum. Ranks that read different numbers are the
  bug itself: LocalTensorMode refuses to combine them, so run.py keeps each
  rank's (world.reads), as real process groups see them. Forward.
* ``number``: arithmetic with Python numbers and 0-d tensors, forward and
  backward; ``compare`` (bool results): forward.
* ``like``: factories from a DTensor; ``empty_like``'s values are not
  judged (run.UNINITIALIZED), only its metadata. Forward.
* ``random``: randomness.py's chains and oracle (the promise DTensor makes on
  a CPU mesh, with its evidence, is that module's design note). Forward.
"""

from __future__ import annotations

import functools
import inspect
import warnings

import torch

from ..cases.opinfo import Sample
from . import composites, randomness, support

PREFIX = "surface."
INPLACE, VIEW, SCALAR, NUMBER, COMPARE, LIKE, RANDOM = "inplace", "view", "scalar", "number", "compare", "like", "random"

# chain name -> (kind, source)
CHAINS = {
    # in place: self returned (judged), or the op's return and self where they differ
    "mul_": (INPLACE, "lambda x: x.mul_(2.5)"),
    "add_scalar_": (INPLACE, "lambda x: x.add_(1.5)"),
    "add_": (INPLACE, "lambda x, y: x.add_(y)"),
    "sub_alpha_": (INPLACE, "lambda x, y: x.sub_(y, alpha=0.5)"),
    "addcmul_": (INPLACE, "lambda x, y: x.addcmul_(y, y, value=0.5)"),
    "neg_": (INPLACE, "lambda x: x.neg_()"),
    "clamp_": (INPLACE, "lambda x: x.clamp_(-0.5, 0.5)"),
    "copy_": (INPLACE, "lambda x, y: x.copy_(y)"),
    "zero_": (INPLACE, "lambda x: x.zero_()"),
    "fill_": (INPLACE, "lambda x: x.fill_(1.25)"),
    "masked_fill_": (INPLACE, "lambda x, mask: x.masked_fill_(mask, -1.5)"),
    "view_mul_": (INPLACE, "lambda x: (x[1:].mul_(2.0), x)[1]"),
    "view_mul_both": (INPLACE, "lambda x: (x[1:].mul_(2.0), x)"),
    "column_fill_both": (INPLACE, "lambda x: (x[:, 1].fill_(0.5), x)"),
    "add_both": (INPLACE, "lambda x, y: (x.add_(y, alpha=2.0), x)"),
    # in-place views: the result, and a later op on it
    "t_": (VIEW, "lambda x: (x.t_(), x.sum(0))"),
    "transpose_": (VIEW, "lambda x: (x.transpose_(0, 1), x.cumsum(1))"),
    "swapdims_": (VIEW, "lambda x: (x.swapdims_(0, 1), x * 2.0)"),
    "unsqueeze_": (VIEW, "lambda x: (x.unsqueeze_(0), x.sum(1))"),
    "squeeze_dim_": (VIEW, "lambda x: ((v := x.unsqueeze(1).squeeze_(1)), v.sum(0))"),
    "squeeze_": (VIEW, "lambda x: ((v := x.unsqueeze(0).unsqueeze(2).squeeze_()), v.cumsum(1))"),
    "slice_squeeze_": (VIEW, "lambda x: ((v := x[:1].squeeze_(0)), v * 2.0)"),
    # Python scalars read from DTensors
    "item_sum": (SCALAR, "lambda x: x.sum().item()"),
    "item_amax": (SCALAR, "lambda x: x.amax().item()"),
    "item_norm": (SCALAR, "lambda x: x.norm().item()"),
    "item_index": (SCALAR, "lambda x: x[1, 2].item()"),
    "tolist": (SCALAR, "lambda x: x[1].tolist()"),
    "float_sum": (SCALAR, "lambda x: float(x.sum())"),
    "bool_any": (SCALAR, "lambda x: bool((x > 1.5).any())"),
    "bool_all": (SCALAR, "lambda x: bool((x > -1.5).all())"),
    "int_argmax": (SCALAR, "lambda x: int(x.argmax())"),
    # a number read, then used: each rank goes on with its own (judged on gloo ranks: the simulator cannot follow)
    "div_item": (NUMBER, "lambda x: x / x.sum().item()"),
    # numbers and 0-d tensors
    "add_number": (NUMBER, "lambda x: x + 2.5"),
    "rsub_number": (NUMBER, "lambda x: 2.5 - x"),
    "mul_int": (NUMBER, "lambda x: x * 3"),
    "div_number": (NUMBER, "lambda x: x / 0.5"),
    "pow_2": (NUMBER, "lambda x: x ** 2"),
    "rpow": (NUMBER, "lambda x: 2.0 ** x"),
    "mul_0d": (NUMBER, "lambda x: x * torch.tensor(3.0)"),
    "add_0d": (NUMBER, "lambda x: x + torch.tensor(-1.5, dtype=x.dtype)"),
    "div_0d_dtensor": (NUMBER, "lambda x: x / x.abs().sum()"),
    "sub_mean": (NUMBER, "lambda x: x - x.mean()"),
    "mul_amax": (NUMBER, "lambda x: x * x.amax()"),
    "sum_add_number": (NUMBER, "lambda x: x.sum(0) + 1.0"),
    "sum_rsub_number": (NUMBER, "lambda x: 1.0 - x.sum(0)"),
    "where_number": (NUMBER, "lambda x: torch.where(x > 0, x, 0.0)"),
    "clamp_min_number": (NUMBER, "lambda x: torch.clamp(x, min=-0.5)"),
    "gt_number": (COMPARE, "lambda x: x > 0.5"),
    "eq_number": (COMPARE, "lambda x: (x * 0) == 0.0"),
    "in_range": (COMPARE, "lambda x: (x >= -0.5) & (x < 1.0)"),
    # factories from a DTensor
    "zeros_like": (LIKE, "lambda x: torch.zeros_like(x)"),
    "ones_like": (LIKE, "lambda x: torch.ones_like(x)"),
    "full_like": (LIKE, "lambda x: torch.full_like(x, 2.5)"),
    "empty_like": (LIKE, "lambda x: torch.empty_like(x)"),
    "ones_like_sum": (LIKE, "lambda x: torch.ones_like(x).sum(0)"),
    "new_zeros": (LIKE, "lambda x: x.new_zeros((3, 4))"),
    "new_full": (LIKE, "lambda x: x.new_full((3, 4), 2.5)"),
    "new_ones_shape": (LIKE, "lambda x: x.new_ones(x.shape)"),
    **{name: (RANDOM, chain) for name, (chain, _) in randomness.CHAINS.items()},
}
SHAPES = ((12, 12), (5, 7))
DTYPES = ("float64", "float32", "float16", "bfloat16")


def names() -> tuple[str, ...]:
    return tuple(PREFIX + name for name in CHAINS)


def is_surface(op: str) -> bool:
    return op.startswith(PREFIX)


def kind(op: str) -> str:
    return CHAINS[op.removeprefix(PREFIX)][0]


def is_random(op: str) -> bool:
    return is_surface(op) and op.removeprefix(PREFIX) in CHAINS and kind(op) == RANDOM


def variants(op: str) -> tuple[str, ...]:
    """Mutating, scalar-reading, factory, comparison and random chains have no gradient worth judging: forward only."""
    return ("functional", "backward") if kind(op) == NUMBER else ("functional",)


def source(op: str) -> str:
    return CHAINS[op.removeprefix(PREFIX)][1]


def repro_source(op: str) -> str:
    """The expression a repro script calls: the chain, its Python number made a tensor as the sweep judges it."""
    if kind(op) == SCALAR:
        return f"(lambda *a: torch.as_tensor(({source(op)})(*a)))"
    return f"({source(op)})"


@functools.cache
def function(op: str):
    chain = eval(source(op), {"torch": torch})  # our own source, above
    if kind(op) == RANDOM:
        return _quiet_random(chain)
    if kind(op) in (INPLACE, VIEW):
        return functools.wraps(chain)(lambda *args: chain(*(_fresh(a) for a in args)))
    return chain


def samples(op: str, dtype: str) -> list[Sample]:
    name = op.removeprefix(PREFIX)
    arguments = list(inspect.signature(function(op)).parameters)
    found = []
    for index, shape in enumerate(SHAPES):
        generator = composites.seeded(op, dtype, index)
        made = []
        for argument in arguments:
            if argument == "mask":
                made.append(torch.rand(shape, generator=generator) < 0.3)
                continue
            t = torch.randn(shape, generator=generator, dtype=torch.float64).to(getattr(torch, dtype))
            made.append(torch.full_like(t, float("nan")) if argument == "x" and name in randomness.NAN_INPUT else t)
        found.append(Sample(input=made[0], args=tuple(made[1:]), kwargs={}, output_process_fn_grad=lambda out: out))
    return found


def _quiet_random(chain):
    """``chain`` on fresh arguments, without DTensor's warning that its random ops are not fully supported on a CPU
    mesh (on every draw): what it does support there is what randomness.py holds it to."""

    @functools.wraps(chain)
    def call(*args):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support")
            return chain(*(_fresh(a) for a in args))

    return call


def _fresh(t: torch.Tensor) -> torch.Tensor:
    """``t`` in storage of its own; a DTensor keeps its placements (see the design note)."""
    DTensor = support.dtensor().DTensor
    if not isinstance(t, DTensor):
        return t.clone()
    return DTensor.from_local(t.to_local().clone(), t.device_mesh, t.placements, run_check=False, shape=t.shape,
                              stride=t.stride())
