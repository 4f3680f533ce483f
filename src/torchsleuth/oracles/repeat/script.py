"""The repro script of a ``repeat`` finding: A, then B with one number or the dtype changed, then A again.

Design note. Built from the repro kit's parts (scripts.parts) and helpers
(scripts.kit, and this oracle's own in ``helpers``, copied in as real
code). The script rebuilds the sample's tensors once and makes the three
calls on them, as the oracle did (a fresh copy of ``self`` for an in-place
call; whatever a call writes by contract put back after it), then checks
what the oracle checked. Both forms share the first check:

1. the second A gives the first A's bits (unless two more calls of A,
   with nothing in between, disagree with each other: then the op is
   nondeterministic and nothing is concluded).

With a number changed (``repeat:alpha=0.5``), B is the call with that
number set, and the second check (``helpers.check_number``) is

2. B is not A's result where it should not be: an element is stale when B
   holds A's bits there, B disagrees with B's reference beyond
   ``ATOL + RTOL * |reference| + SLACK``, and A's reference disagrees with
   B's reference there too.

The references are made the way the oracle made them, so that no cache
can serve them: for a floating case, the call in float64 (complex128) on
the CPU on copies nudged by up to one unit of roundoff (and three more
times, with other nudges: how far those land from the first is the op's
sensitivity, and sixteen times it is allowed on top); for an integer case,
the call on the CPU in another integer dtype (or the same one, for a case
on another device), exactly. ``SLACK`` is what the oracle's rule allowed
beyond the table at the worst element.

With another dtype (``repeat:dtype=float64``), B is the call on copies of
the tensors with every tensor of the case's dtype in the other, on the same
device (dtype arguments of the case's dtype turned too), and the second
check (``helpers.check_dtype``) is

2. each tensor of B's result has the dtype the same call gives on the meta
   device, which no kernel cache serves (an op without a meta kernel: only
   the first check, as in the oracle).

What the script needs of the oracle (both values of the number or B's
dtype, the check that failed, how B's reference was made) is the finding's
``Detail`` record. Exit 1 while either check fails, 0 once both pass, 2
when a call (A or B) raises. A crash or hang the sweep saw in such a case
carries no ``Detail``: it gets the kit's isolation script for B's call (the
number changed, or the tensors' bytes turned into the other dtype), as the
case's oracle name says (``detail.Change``).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import zlib

import torch

from ...cases.records import Case
from ...dtypes import unit_roundoff
from ...judge.plugin import decode_detail
from ...judge.records import Finding
from ...judge.tolerance import PRECISION_MARGIN, table
from ...run.records import CallSpec
from ...scripts import checks, parts
from . import helpers
from .detail import AGAIN, NUDGED, Change, Detail, argument_position, source_literal

# A function of the script: (its name, the call's source, its docstring).
Function = tuple[str, str, str]


def script(finding: Finding, torch_version: str) -> str | None:
    """The script of one repeat finding; None when its call cannot be written (the generic script says why)."""
    call = parts.writable_call(finding)
    if call is None:
        return None
    if finding.kind in ("crash", "hang"):  # the sweep saw the worker die: B's call, in a child process
        change = Change.parse(Case.parse(finding.case_id).oracle)
        b_call = (_retyped_call(call, finding.dtype, change.dtype) if change.dtype
                  else _changed_call(call, change.argument, source_literal(change.number)))
        return "\n".join(checks.isolation(finding, b_call, torch_version))
    if finding.kind != "stale_result":
        return None
    detail = decode_detail(Detail, finding)
    if detail is None:
        return parts.no_record(finding, torch_version, "what B changed")
    source_a = parts.call_source(call)
    if detail.b_dtype:
        constants, functions, source, check = _dtype_parts(finding, detail, source_a)
    else:
        constants, functions, source, check = _number_parts(finding, detail, source_a)
    constants = [f"CASE_DTYPE = {finding.dtype!r}", *constants,
                 f"WRITTEN = {parts.written(call)!r}  # an in-place call gets a fresh copy of these",
                 f"CALL_A = {source_a!r}", f"CALL_B = {functions[0][1]!r}"]
    lines = parts.preamble(finding, call, torch_version, helpers.KIT, constants)
    lines += ["", "", "\n\n\n".join(inspect.getsource(f).rstrip("\n") for f in source)]
    for name, function_source, what in (("call_a", source_a, "A: the call as the sample makes it"), *functions):
        lines += ["", "", f"def {name}(T):", f'    """{what}."""', f"    return {function_source}"]
    lines += parts.tensors_function(call)
    lines += ["", "", "def main():", f"    return {check}(tensors(), call_a, {', '.join(name for name, _, _ in functions)})"]
    return "\n".join(lines + parts.data_block(call) + parts.footer())


def _number_parts(finding: Finding, detail: Detail, source_a: str) -> tuple[list[str], list[Function], tuple, str]:
    """The number form's constants, functions (B's first), helpers and check."""
    tol = table(getattr(torch, finding.dtype)) if detail.b_reference == NUDGED else None
    atol, rtol = (PRECISION_MARGIN * tol.atol, PRECISION_MARGIN * tol.rtol) if tol else (0.0, 0.0)
    m = finding.mismatch
    slack = 0.0
    if tol and m is not None and m.allowed is not None and math.isfinite(m.allowed) and detail.check != AGAIN:
        try:
            slack = max(0.0, m.allowed - atol - rtol * abs(float(m.expected)))
        except ValueError:
            slack = 0.0
    source_b = _changed_source(source_a, detail.argument, detail.b_number)
    roundoff = max(unit_roundoff(getattr(torch, finding.dtype)), unit_roundoff(torch.float32))
    constants = [
        f"NUDGED = {NUDGED!r}",
        f"B_REFERENCE = {detail.b_reference!r}  # how B's reference is made: from inputs no other call has used ('': none)",
        f"REFERENCE_DTYPE = {detail.reference_dtype!r}  # the dtype it computes in ('': the case's own)",
        f"UNIT_ROUNDOFF = {roundoff!r}  # the nudge: at least float32's roundoff",
        f"ATOL, RTOL = {atol!r}, {rtol!r}  # the tolerance table's for the references' precision, times {PRECISION_MARGIN:g}",
        f"SLACK = {slack!r}  # what torchsleuth's rule allowed beyond them at the worst element",
        f"CHANGE = {f'{detail.argument} changed from {detail.a_number} to {detail.b_number},'!r}",
    ]
    functions = [("call_b", source_b, f"B: the same call with {detail.argument}={detail.b_number}"),
                 ("reference_b", _retargeted(source_b, finding.dtype, detail.reference_dtype, keywords="cpu"),
                  "B on the reference's copies")]
    return constants, functions, helpers.NUMBER_SOURCE, "check_number"


def _dtype_parts(finding: Finding, detail: Detail, source_a: str) -> tuple[list[str], list[Function], tuple, str]:
    """The dtype form's constants, functions (B's first), helpers and check."""
    other = detail.b_dtype
    constants = [
        f"OTHER_DTYPE = {other!r}  # B's tensors of the case's dtype, and its dtype arguments, in this one",
        f"CASE_DEVICE = {finding.device!r}  # B's copies stay on the case's device",
        "ATOL, RTOL = 0.0, 0.0  # unused: A is compared with A bit for bit, B by its dtypes",
    ]
    functions = [("call_b", _retargeted(source_a, finding.dtype, other), f"B: the same call on the copies in {other}"),
                 ("call_meta", _retargeted(source_a, finding.dtype, other, objects="meta"),
                  "B on the meta device, whose result has the dtypes the op gives for B's inputs")]
    return constants, functions, helpers.DTYPE_SOURCE, "check_dtype"


# --- the calls' source, rewritten ------------------------------------------------------------


class _Retarget(ast.NodeTransformer):
    """The case's dtype to ``target``; ``device=`` keywords to ``keywords``, ``torch.device(...)`` to ``objects``, where given."""

    def __init__(self, dtype: str, target: str, *, keywords: str = "", objects: str = ""):
        self.dtype, self.target, self.keywords, self.objects = dtype, target, keywords, objects

    def visit_keyword(self, node: ast.keyword) -> ast.keyword:
        self.generic_visit(node)
        if self.keywords and node.arg == "device" and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            node.value = ast.Constant(self.keywords)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if self.objects and ast.unparse(node.func) == "torch.device":
            return ast.parse(f"torch.device({self.objects!r})", mode="eval").body
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if self.target and ast.unparse(node) == f"torch.{self.dtype}":
            return ast.parse(f"torch.{self.target}", mode="eval").body
        return self.generic_visit(node)


def _retargeted(source: str, dtype: str, target: str, **devices: str) -> str:
    """A call's source with ``torch.<dtype>`` turned into ``torch.<target>`` (none when ``target`` is ""), devices as given."""
    return ast.unparse(_Retarget(dtype, target, **devices).visit(ast.parse(source, mode="eval").body))


def _changed_source(source: str, argument: str, literal: str) -> str:
    """The call's source with the number ``argument`` (``args[i]`` or a keyword) set to the source ``literal``."""
    tree = ast.parse(source, mode="eval").body
    assert isinstance(tree, ast.Call)
    value = ast.parse(literal, mode="eval").body
    position = argument_position(argument)
    if position is not None:
        tree.args[position] = value
    else:
        for keyword in tree.keywords:
            if keyword.arg == argument:
                keyword.value = value
    return ast.unparse(tree)


def _rewritten_call(call: CallSpec, rewrite) -> CallSpec:
    """``call`` with its arguments' source rewritten by ``rewrite`` (the source of a call ``f(...)``)."""
    tree = ast.parse(rewrite(f"f({', '.join(s for s in (call.args_src, call.kwargs_src) if s)})"), mode="eval").body
    args = ", ".join(ast.unparse(a) for a in tree.args)
    kwargs = ", ".join(f"{k.arg}={ast.unparse(k.value)}" for k in tree.keywords)
    return dataclasses.replace(call, args_src=args, kwargs_src=kwargs)


def _changed_call(call: CallSpec, argument: str, literal: str) -> CallSpec:
    """``call`` with the number ``argument`` set to the source ``literal``."""
    return _rewritten_call(call, lambda source: _changed_source(source, argument, literal))


def _retyped_call(call: CallSpec, dtype: str, other: str) -> CallSpec:
    """``call`` with every tensor of ``dtype`` (its bytes converted) and dtype argument in ``other``."""
    def retyped(spec):
        if spec.dtype != dtype:
            return spec
        data = spec.data
        if data is not None:
            raw, old = bytearray(zlib.decompress(data)), getattr(torch, dtype)
            flat = torch.frombuffer(raw, dtype=torch.uint8).view(old) if raw else torch.empty(0, dtype=old)
            data = zlib.compress(flat.to(getattr(torch, other)).view(torch.uint8).numpy().tobytes())
        return dataclasses.replace(spec, dtype=other, data=data)

    call = _rewritten_call(call, lambda source: _retargeted(source, dtype, other))
    return dataclasses.replace(call, tensors=tuple(retyped(s) for s in call.tensors))
