"""What an ``autodiff`` case judges, and what a finding tells its script: the records the oracle and the script share.

Design note. A case's oracle name says which derivatives it judges, so that
it replays from its id alone: ``autodiff:forward`` (forward mode against
reverse mode, first order) or ``autodiff:second`` (a Hessian-vector product
by double backward, forward over reverse and float64 finite differences of
the gradient). A case with layouts (``input=transposed``) judges the call
with its differentiated tensors so laid out, and nothing else: that is how a
finding on a laid-out configuration replays.

A ``gradient_mismatch`` finding carries a ``Detail`` in ``Finding.data``
(``judge.plugin.encode_detail``): which check failed, the argument
differentiated, the precision the derivatives were computed in, the seeds
of the tangent and the cotangents, and what the rule allowed at the worst
element. ``Finding.detail`` says the same in a sentence; nothing parses it.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "autodiff:"
FORWARD, SECOND = "forward", "second"
FORMS = (FORWARD, SECOND)

# The checks a finding can come from (``Detail.check``), each a comparison the script makes again.
MODES = "modes"  # forward mode's J v against reverse mode's J v, element by element (autodiff:forward)
CONTRACTION = "contraction"  # u . (J v) by forward mode against (u^T J) . v by reverse mode (autodiff:forward)
FINITE = "finite"  # an autodiff result against float64 central differences (either form)
SECOND_MODES = "second-modes"  # double backward's H v against forward over reverse's (autodiff:second)
CHECKS = (MODES, CONTRACTION, FINITE, SECOND_MODES)

# The modes, as findings and scripts name them.
FORWARD_MODE, REVERSE_MODE, BOTH_MODES = "forward mode", "reverse mode", "forward and reverse mode"
DOUBLE_BACKWARD, FORWARD_OVER_REVERSE = "double backward", "forward over reverse"

# What a finding's reference names: what the wrong side was judged against.
REFERENCES = {MODES: "reverse-mode", CONTRACTION: "reverse-mode", FINITE: "finite-differences", SECOND_MODES: "forward-over-reverse"}


def form(oracle: str) -> str:
    """``"autodiff:second"`` -> ``"second"``."""
    return oracle.removeprefix(PREFIX)


def seeds(sample: int, index: int) -> tuple[int, int]:
    """The seeds of the tangent and of the cotangents for the ``index``-th argument differentiated in a sample."""
    base = 1_000 * (sample + 1) + 10 * index
    return base, base + 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    """What an ``autodiff`` finding's script reads back (``Finding.data``)."""

    form: str  # one of FORMS
    check: str  # one of CHECKS
    mode: str  # the mode found wrong: FORWARD_MODE, REVERSE_MODE, BOTH_MODES, DOUBLE_BACKWARD or FORWARD_OVER_REVERSE
    argument: str  # the tensor differentiated, by its path in the call ("input", "args[0]", "weight")
    precision: str  # the dtype the derivatives were computed in ("float64" when the case's tensors were widened)
    layout: str = "contiguous"  # the argument's layout (its tangent is laid out alike)
    tangent_seed: int = 0
    cotangent_seed: int = 0  # the first output's; the i-th output's is this plus i
    output: str = ""  # the leaf the worst element is in ("out", "out[0]"; "grad" for a second derivative); "" for a contraction
    index: tuple[int, ...] = ()  # the worst element
    atol: float = 0.0  # the rule at the worst element: |actual - expected| <= atol + rtol * |expected| + slack
    rtol: float = 0.0
    slack: float = 0.0
    values: tuple[str, ...] = ()  # what each side gave at the worst element, as "name: value" ("forward mode: 1.34")
