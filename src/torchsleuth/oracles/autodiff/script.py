"""The repro script of an ``autodiff`` finding: the derivatives compared again, standalone.

Design note. Assembled from the repro kit's parts (scripts.parts: header,
``rebuild`` and the tensors' bytes, the call as source, the footer), the
kit's ``leaves`` and ``fmt``, and this oracle's own code, copied in with
``inspect.getsource``: the derivatives (autodiff.helpers) and the check of
each form (autodiff.mains). The script rebuilds the sample's tensors exactly
as the finding's call saw them (a laid-out argument with its strides), and
writes the call twice: ``call(T)`` as found, and ``call_wide(T)`` with dtype
arguments of the case's dtype in float64 (complex128), for the float64
copies (``widened``) the derivatives were taken in when ``PRECISION`` says
so, and finite differences always. Everything else it needs (which check,
which mode, the argument, the precision, the seeds, what the rule allowed
at the worst element) is the finding's ``Detail`` (autodiff.detail). Exit 1
while the check fails, 0 once it passes, 2 when the call raises.
"""

from __future__ import annotations

import ast
import inspect

import torch

from ...dtypes import name as dtype_name
from ...dtypes import wide
from ...judge.records import Finding
from ...scripts import parts, steps
from . import helpers, mains
from .detail import CONTRACTION, DOUBLE_BACKWARD, FINITE, FORWARD, MODES, SECOND, SECOND_MODES, Detail

# The oracle's code a script holds, in the order it is written out.
HELPERS = (helpers.inexact, helpers.like, helpers.widened, helpers.widen, helpers.upload, helpers.draw, helpers.tangent, helpers.outputs,
           helpers.cotangents, helpers.forward_mode, helpers.graph, helpers.reverse_mode, helpers.reverse_jvp, helpers.double_backward,
           helpers.forward_over_reverse, helpers.finite_differences, helpers.tainted, helpers.untainted, helpers.moved, helpers.shifts,
           helpers.output_differences, helpers.smooth_elsewhere, helpers.gradient_differences, helpers.lopsided, helpers.masked,
           helpers.contraction, helpers.far, helpers.show, mains.precision, mains.kinks, mains.at_index)
CHECKS = {FORWARD: mains.check_first, SECOND: mains.check_second}


def script(finding: Finding, torch_version: str) -> str | None:
    """The finding's standalone script; None where the generic one applies (no call to write out)."""
    if finding.kind in ("crash", "hang"):  # the generic script's ladder (scripts.steps), which imports the run's --import modules
        return None if parts.writable_call(finding) else steps.script(finding, torch_version, "the autodiff oracle's own derivatives of the call")
    if finding.kind != "gradient_mismatch":
        return None
    call, detail, answer = parts.recorded(finding, Detail, torch_version, "the derivatives compared")
    if call is None:
        return answer
    assert isinstance(detail, Detail)
    source = parts.call_source(call)
    wide_source = _widened(source, finding.dtype)
    check = CHECKS[detail.form]
    lines = parts.preamble(finding, call, torch_version, ("leaves", "fmt"), constants(finding, detail, source), imports=("math",))
    lines += ["", "", "\n\n\n".join(inspect.getsource(f).rstrip("\n") for f in (*HELPERS, check))]
    lines += ["", "", "def call(T):", '    """The call as torchsleuth made it."""', f"    return {source}"]
    lines += ["", "", "def call_wide(T):", '    """The call on float64 (complex128) copies: dtype arguments of the case\'s dtype widened too."""',
              f"    return {wide_source}"]
    lines += parts.tensors_function(call)
    lines += ["", "", "def main():", "    T = tensors()",
              f"    print({('torchsleuth repro: ' + _what(detail))!r})",
              "    print('call:', CALL)", "    describe(T)",
              f"    if {check.__name__}(call, call_wide, T):",
              '        print("BUG PRESENT:", SUMMARY)', "        return 1",
              '    print("OK: the derivatives agree")', "    return 0"]
    return "\n".join(lines + parts.data_block(call) + parts.footer())


def constants(finding: Finding, detail: Detail, source: str) -> list[str]:
    """The script's constants: what the copied helpers and checks read as globals."""
    return [
        f"CALL = {source!r}",
        f"CASE_DTYPE = {finding.dtype!r}",
        f"PRECISION = {detail.precision!r}  # the derivatives are taken in this dtype (float64: on widened copies)",
        f"ARGUMENT = {detail.argument!r}  # the tensor differentiated ({detail.layout}; its tangent laid out alike)",
        f"CHECK = {detail.check!r}  # which comparison failed",
        f"MODE = {detail.mode!r}  # the mode found wrong",
        f"MODES, CONTRACTION, FINITE, SECOND_MODES = {MODES!r}, {CONTRACTION!r}, {FINITE!r}, {SECOND_MODES!r}",
        f"DOUBLE_BACKWARD = {DOUBLE_BACKWARD!r}",
        f"TANGENT_SEED, COTANGENT_SEED = {detail.tangent_seed!r}, {detail.cotangent_seed!r}",
        f"OUTPUT, INDEX = {detail.output!r}, {detail.index!r}  # where the finding's worst element is",
        f"ATOL, RTOL, SLACK = {detail.atol!r}, {detail.rtol!r}, {detail.slack!r}  # two modes: |a - b| <= ATOL + RTOL * |b| + SLACK",
        f"STEPS = {helpers.STEPS!r}  # finite differences: one-sided and central quotients at these steps",
        f"SCALE = {helpers.SCALE!r}  # the tangent is standard normal times max(1, SCALE * |x|)",
        f"CONFIRM_SHIFTS, SHIFT_SEED = {helpers.CONFIRM_SHIFTS!r}, {helpers.SHIFT_SEED!r}  # and at points near x: tangents seeded TANGENT_SEED + k SHIFT_SEED",
        f"OTHER_SEED = {helpers.OTHER_SEED!r}  # each other floating argument moved alone along a tangent seeded OTHER_SEED + its position",
        f"SMOOTH, NOISE = {helpers.SMOOTH!r}, {helpers.NOISE!r}  # where the quotients agree, the function is smooth along the tangent",
        f"FD_ATOL, FD_RTOL = {helpers.FD_ATOL!r}, {helpers.FD_RTOL!r}  # autodiff against finite differences (plus their error estimate)",
        f"CONTRACTION_ATOL, CONTRACTION_RTOL = {helpers.CONTRACTION_ATOL!r}, {helpers.CONTRACTION_RTOL!r}",
        f"LOPSIDED = {helpers.LOPSIDED!r}  # in a narrow dtype, two modes disagree only where one is this much farther from its float64 value",
    ]


def _what(detail: Detail) -> str:
    if detail.form == FORWARD:
        return "first derivatives (J v) by forward and reverse mode agree with each other and with float64 finite differences"
    return "second derivatives (H v) by double backward and forward over reverse agree with each other and with float64 finite differences"


class _Widen(ast.NodeTransformer):
    """``torch.<dtype>`` to its float64 (complex128) counterpart."""

    def __init__(self, dtype: str):
        self.dtype, self.wide = dtype, dtype_name(wide(getattr(torch, dtype)))

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if ast.unparse(node) == f"torch.{self.dtype}":
            return ast.parse(f"torch.{self.wide}", mode="eval").body
        return self.generic_visit(node)


def _widened(source: str, dtype: str) -> str:
    """The call's source with dtype arguments of ``dtype`` widened."""
    return ast.unparse(_Widen(dtype).visit(ast.parse(source, mode="eval").body))
