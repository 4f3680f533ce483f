"""The steps a compiled chain is made of, and the chains an op takes part in.

Design note. Inductor's wrong outputs often need two or three ops fused: a
pointwise op feeding a reduction whose tiled loop drops the tail of a length
that is not a power of two; a transpose inside the graph read as if
contiguous by the pointwise kernel it fuses into; an index feeding a sum; an
in-place write into a view of an intermediate. A chain is a short program
around one op of the catalog, its anchor (the unit's op, called on one of its
samples with that sample's arguments):

    pre steps (on the sample's ``input``) -> the anchor -> post steps (on its result)

Each step is one entry of ``STEPS``, a small curated table by kind
(``POINTWISE``, ``REDUCTION``, ``VIEW``, ``INDEX``, ``INPLACE``: an in-place
op on a view of a fresh copy), written once as Python source of ``x``: the
oracle evaluates that source to run the step, and the repro script prints the
same source, so what runs and what a reader sees cannot drift apart.

A chain's spec is its steps' names joined by ``>``, ``@`` standing for the
anchor (``sin>@>sum``); the case's oracle name carries it
(``compile:chain:sin>@>sum``), so a chain is replayed, shrunk and scripted
from its case id like any other case, on the anchor's sample, layouts, dtype
and searched values.

Typed composition. ``TEMPLATES`` are the shapes of chain the issue names
(pointwise into the op, the op into a reduction, a view into the op, the op
viewed into a pointwise, an index into a reduction, an in-place op on a view,
and four-op ones), as kinds; ``compose`` fills a template's kinds with steps
of the table, starting at an entry turned by a digest of the op, dtype and
chain number (so ops get different steps, and a chain is the same on every
run), and takes the first steps whose eager run on the sample goes through:
every step applies (ranks, dtypes, sizes), a pre step keeps the input's
dtype (the case's dtype is the anchor's), and the anchor's result is one
tensor where post steps follow. Eager runs of a few small tensors: cheap next
to the compile.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

import torch

POINTWISE, REDUCTION, VIEW, INDEX, INPLACE = "pointwise", "reduction", "view", "index", "inplace"
ANCHOR = "@"
PREFIX = "chain:"  # the compile oracle's option on a chain case: "compile:chain:sin>@>sum"


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    kind: str
    source: str  # an expression of x, the step's input; torch in scope
    words: str  # how it reads around its input ("{}")


STEPS = (
    Step("neg", POINTWISE, "torch.neg(x)", "neg({})"),
    Step("sin", POINTWISE, "torch.sin(x)", "sin({})"),
    Step("exp", POINTWISE, "torch.exp(x)", "exp({})"),
    Step("mul3", POINTWISE, "x * 3", "{} * 3"),
    Step("tanh", POINTWISE, "torch.tanh(x)", "tanh({})"),
    Step("add1", POINTWISE, "x + 1", "{} + 1"),
    Step("sigmoid", POINTWISE, "torch.sigmoid(x)", "sigmoid({})"),
    Step("abs", POINTWISE, "torch.abs(x)", "abs({})"),
    Step("sum", REDUCTION, "x.sum(-1)", "{}.sum(-1)"),
    Step("amax", REDUCTION, "x.amax(-1)", "{}.amax(-1)"),
    Step("sumall", REDUCTION, "x.sum()", "{}.sum()"),
    Step("mean", REDUCTION, "x.mean(0)", "{}.mean(0)"),
    Step("prod", REDUCTION, "x.prod(-1)", "{}.prod(-1)"),
    Step("t", VIEW, "x.mT", "{}.mT"),
    Step("slice", VIEW, "x[..., ::2]", "{}[..., ::2]"),
    Step("permute", VIEW, "x.permute(tuple(range(x.dim() - 1, -1, -1)))", "{}.permute(reversed)"),  # not *range: dynamo unpacks a
    # range's arguments there, not its items (bench/compiled-chains.md)
    Step("narrow", VIEW, "x[1:]", "{}[1:]"),
    Step("expand", VIEW, "x.unsqueeze(0).expand(3, *x.shape)", "{}.expand(3, ...)"),
    Step("diagonal", VIEW, "x.diagonal(0, -2, -1)", "{}.diagonal()"),
    Step("take", INDEX, "x.take(torch.arange(-1, -x.numel() - 1, -2, device=x.device))", "{}.take(negative indices)"),
    Step("index_select", INDEX, "x.index_select(-1, torch.arange(x.shape[-1] - 1, -1, -1, device=x.device))", "{}.index_select(-1, reversed)"),
    Step("gather", INDEX, "x.gather(-1, (torch.arange(x.shape[-1], device=x.device) * 2 % x.shape[-1]).expand(x.shape))", "{}.gather(-1, ...)"),
    Step("index_add", INDEX, "x.index_add(0, torch.zeros(x.shape[0], dtype=torch.long, device=x.device), x)", "{}.index_add(0, zeros, ...)"),
    Step("mul_slice_", INPLACE, "(y := x.clone(), y[..., ::2].mul_(3), y)[-1]", "{}[..., ::2] *= 3"),
    Step("add_t_", INPLACE, "(y := x.clone(), y.mT[1:].add_(1), y)[-1]", "{}.mT[1:] += 1"),
    Step("neg_diag_", INPLACE, "(y := x.clone(), y.diagonal(0, -2, -1).neg_(), y)[-1]", "{}.diagonal().neg_()"),
    Step("copy_row_", INPLACE, "(y := x.clone(), y[1:].copy_(y[:-1].clone()), y)[-1]", "{}[1:] = {}[:-1]"),
)
BY_NAME = {step.name: step for step in STEPS}

# (kinds before the anchor, kinds after it), in the order an op's chains take them.
TEMPLATES = (
    ((POINTWISE,), ()),
    ((), (REDUCTION,)),
    ((VIEW,), ()),
    ((), (VIEW, POINTWISE)),
    ((), (INDEX, REDUCTION)),
    ((INPLACE,), ()),
    ((POINTWISE,), (VIEW, REDUCTION)),
    ((), (INPLACE, POINTWISE)),
    ((POINTWISE,), (INDEX,)),
    ((VIEW,), (POINTWISE, REDUCTION)),
)


@dataclass(frozen=True, slots=True)
class Chain:
    pre: tuple[Step, ...]
    post: tuple[Step, ...]

    @property
    def spec(self) -> str:
        return ">".join([*(s.name for s in self.pre), ANCHOR, *(s.name for s in self.post)])

    @property
    def length(self) -> int:
        return len(self.pre) + 1 + len(self.post)

    def words(self, op: str) -> str:
        """How the chain reads: ``sum(sin(x)).mT`` (the anchor with its sample's other arguments as ``...``)."""
        text = "x"
        for step in self.pre:
            text = step.words.format(text, text)
        text = f"{op}({text}, ...)"
        for step in self.post:
            text = step.words.format(text, text)
        return text

    def dropped(self) -> list["Chain"]:
        """The chains one step shorter (the anchor stays: the sample is its)."""
        return ([Chain(self.pre[:i] + self.pre[i + 1:], self.post) for i in range(len(self.pre))]
                + [Chain(self.pre, self.post[:i] + self.post[i + 1:]) for i in range(len(self.post))])


def parse(spec: str) -> Chain:
    """The chain a spec names (``sin>@>sum``); ValueError for an unknown step."""
    names = spec.split(">")
    if names.count(ANCHOR) != 1:
        raise ValueError(f"a chain spec has one anchor {ANCHOR!r}: {spec!r}")
    at = names.index(ANCHOR)
    unknown = [n for n in names if n != ANCHOR and n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown chain steps {unknown} in {spec!r}; known: {', '.join(BY_NAME)}")
    return Chain(tuple(BY_NAME[n] for n in names[:at]), tuple(BY_NAME[n] for n in names[at + 1:]))


def of_oracle(oracle: str) -> Chain | None:
    """The chain of a case's oracle name (``compile:chain:sin>@>sum``), None for any other."""
    _, _, option = oracle.partition(":")
    return parse(option[len(PREFIX):]) if option.startswith(PREFIX) else None


def oracle_name(chain: Chain) -> str:
    return f"compile:{PREFIX}{chain.spec}"


_COMPILED: dict[str, Callable] = {}


def function(step: Step) -> Callable:
    """The step as a function of ``x``, from its source (made once)."""
    if step.name not in _COMPILED:
        _COMPILED[step.name] = eval(f"lambda x: {step.source}", {"torch": torch})  # noqa: S307 - the table's own source
    return _COMPILED[step.name]


def chained(chain: Chain, anchor: Callable) -> Callable:
    """``anchor(input, *args, **kwargs)`` with the chain's pre steps on ``input`` and post steps on its result."""
    pre = tuple(function(s) for s in chain.pre)
    post = tuple(function(s) for s in chain.post)

    def call(input, *args, **kwargs):
        x = input
        for step in pre:
            x = step(x)
        x = anchor(x, *args, **kwargs)
        for step in post:
            x = step(x)
        return x

    return call


def compose(op: str, dtype: str, k: int, anchor: Callable, args: tuple, kwargs: dict) -> Chain | None:
    """The op's ``k``-th chain on a sample's call ``anchor(*args, **kwargs)`` (see the design note), None when no
    steps of its template go through eagerly."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    before, after = TEMPLATES[k % len(TEMPLATES)]
    turn = int(hashlib.sha256(f"{op}|{dtype}|{k}".encode()).hexdigest()[:8], 16)
    pre: list[Step] = []
    x = args[0]
    with torch.no_grad():
        for slot, kind in enumerate(before):
            x = _first(kind, turn + slot, x, pre, keep_dtype=True)
            if x is None:
                return None
        try:
            x = anchor(x, *args[1:], **kwargs)
        except Exception:
            return None
        post: list[Step] = []
        for slot, kind in enumerate(after):
            if not isinstance(x, torch.Tensor):
                return None
            x = _first(kind, turn + len(before) + slot, x, post, keep_dtype=False)
            if x is None:
                return None
    return Chain(tuple(pre), tuple(post))


def _first(kind: str, turn: int, x: torch.Tensor, taken: list[Step], *, keep_dtype: bool):
    """The result of the first step of ``kind`` (from entry ``turn`` on) that runs on ``x``; the step joins ``taken``."""
    options = [s for s in STEPS if s.kind == kind]
    for i in range(len(options)):
        step = options[(turn + i) % len(options)]
        try:
            y = function(step)(x)
        except Exception:
            continue
        if isinstance(y, torch.Tensor) and (not keep_dtype or y.dtype == x.dtype):
            taken.append(step)
            return y
    return None
