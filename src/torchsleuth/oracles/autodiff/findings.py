"""How the ``autodiff`` oracle words a finding: the verdict's mismatch, the modes' values at its element, the record a
repro script reads.

Design note. ``Findings`` is the part of judging.Argument that turns a
verdict into a ``Finding``: which check failed (``MODES``, ``CONTRACTION``,
``FINITE``, ``SECOND_MODES``: detail.py), which mode is suspected (the one
farther from float64 finite differences at the worst element), a summary
that names the op, the argument and its layout, the element, the distance
and what was allowed, and the ``Detail`` the script rebuilds the comparison
from. It reads the argument's attributes (``case``, ``path``, ``prepared``,
``wide``, ``v_seed``, ``u_seed``, ...) and judges nothing itself: the
comparisons are judging.py's, which calls ``_modes`` (forward against
reverse mode in float64, where it is a comparison and a finding at once).
"""

from __future__ import annotations

import math

import torch

from ...judge import calls
from ...judge.context import Context
from ...judge.plugin import encode_detail
from ...judge.records import Finding, Mismatch
from ...run import call
from . import derivatives as dv
from . import helpers
from .detail import BOTH_MODES, CONTRACTION, DOUBLE_BACKWARD, FINITE, FORWARD, FORWARD_MODE, FORWARD_OVER_REVERSE, MODES, REFERENCES, \
    REVERSE_MODE, SECOND, SECOND_MODES, Detail


def amount(number: float | None, missing: str = "a change of class") -> str:
    """A mismatch's distance or allowance in a summary; a change of class (NaN against a number) has neither."""
    return missing if number is None else f"{number:.3g}"


def words(value) -> str:
    """A derivative's value as a summary prints it."""
    if isinstance(value, complex):
        return f"({value.real:.6g}{value.imag:+.6g}j)"
    return f"{value:.6g}"



class Findings:
    """Wording and recording a verdict of judging.Argument (see the design note)."""

    # --- findings ---------------------------------------------------------------------------

    def _modes(self, forward: dict, reverse: dict, fd: dict, v, u, *, suspect: str) -> Finding | None:
        """Forward mode's J v against reverse mode's in float64, element by element. With a ``suspect`` (the mode off finite
        differences), within finite differences' tolerance; without one, by the judge's rule, the suspect then being the
        mode farther from finite differences at the worst element."""
        if suspect:
            m = dv.by_differences(forward, {p: (reverse[p], fd[p][1], fd[p][2]) for p in reverse})
            slack = 0.0
        else:
            smooth = {p: s for p, (_, _, s) in fd.items()}
            m = dv.by_rule(self.wide, dv.FIRST, self.path, v, u, forward, reverse, smooth, override=self.subject.override, op=self.op,
                           noise=self._noise(dv.FIRST, self.call_wide, self.W, v, u),
                           allowance=self._allowance(reverse, self.wide.case.dtype))
            slack = dv.slack_at(m, reverse[m.path]) if m is not None else 0.0
        if m is None:
            return None
        return self._modes_found(m, suspect or suspected(forward, reverse, fd, m), forward, reverse, fd, self.wide.case.dtype, slack)

    def _modes_found(self, m: Mismatch, mode: str, forward: dict, reverse: dict, fd: dict, precision: str, slack: float) -> Finding:
        other = REVERSE_MODE if mode == FORWARD_MODE else FORWARD_MODE
        estimate = dv.at(fd[m.path][0], m.worst_index)
        values = ((FORWARD_MODE, forward), (REVERSE_MODE, reverse), ("finite differences", {p: e for p, (e, _, _) in fd.items()}))
        summary = (f"{mode.replace(' mode', '-mode')} derivative of {self.name()} with respect to {self.argument()} differs from {other} by "
                   f"{amount(m.max_abs_err)} (allowed {amount(m.allowed, 'none')}) at element {list(m.worst_index)} of {m.path}{self._in(precision)}; "
                   f"float64 finite differences give {words(estimate)}, siding with {other}")
        return self._finding(MODES, mode, summary, m, values, precision=precision, slack=slack)

    def _contraction(self, mode: str, s_forward: float, s_reverse: float, allowed: float, fd: dict, u) -> Finding:
        s_fd, _ = helpers.contraction([(c, helpers.masked(e, s)) for c, (e, _, s) in zip(u, fd.values())])
        other = REVERSE_MODE if mode == FORWARD_MODE else FORWARD_MODE
        summary = (f"{mode.replace(' mode', '-mode')} derivative of {self.name()} with respect to {self.argument()} disagrees with {other}: "
                   f"u.(Jv) = {words(s_forward)} by forward mode, (u^T J).v = {words(s_reverse)} by reverse mode (allowed difference "
                   f"{allowed:.3g}){self._in(self.wide.case.dtype)}; float64 finite differences give u.(Jv) = {words(s_fd)}")
        m = Mismatch(path="u.(Jv)", attribute="values", expected=words(s_reverse if mode == FORWARD_MODE else s_forward),
                     actual=words(s_forward if mode == FORWARD_MODE else s_reverse), mismatched=1, numel=1,
                     max_abs_err=abs(s_forward - s_reverse), atol=helpers.CONTRACTION_ATOL, rtol=helpers.CONTRACTION_RTOL, allowed=allowed)
        values = ((f"{FORWARD_MODE} u.(Jv)", s_forward), (f"{REVERSE_MODE} (u^T J).v", s_reverse), ("finite differences u.(Jv)", s_fd))
        return self._finding(CONTRACTION, mode, summary, m, values, precision=self.wide.case.dtype, slack=0.0)

    def _finite(self, mode: str, m: Mismatch, value: dict, fd: dict, *, other: dict | None = None) -> Finding:
        estimate, actual = dv.at(fd[m.path][0], m.worst_index), dv.at(value[m.path], m.worst_index)
        second = m.path.startswith("grad[")
        what = f"second derivative of {self.name()} with respect to {self.argument()}" if second else \
            f"derivative of {self.name()} with respect to {self.argument()}"
        who = {BOTH_MODES: "forward and reverse mode agree but give"}.get(mode, f"{mode} gives")
        summary = (f"{what}: {who} {words(actual)} where float64 finite differences give {words(estimate)} at element "
                   f"{list(m.worst_index)} of {m.path} (off by {amount(m.max_abs_err)}, allowed {amount(m.allowed, 'none')})")
        values = [(mode, value), ("finite differences", {p: e for p, (e, _, _) in fd.items()})]
        if other is not None:
            other_mode = FORWARD_OVER_REVERSE if mode == DOUBLE_BACKWARD else DOUBLE_BACKWARD
            summary += f"; {other_mode} gives {words(dv.at(other[m.path], m.worst_index))}"
            values.insert(1, (other_mode, other))
        return self._finding(FINITE, mode, summary, m, tuple(values), precision=self.wide.case.dtype, slack=0.0)

    def _finding(self, check: str, mode: str, summary: str, m: Mismatch, values, *, precision: str, slack: float) -> Finding:
        form = SECOND if check in (SECOND_MODES,) or m.path.startswith("grad[") else FORWARD
        shown = tuple(f"{name}: {words(v if isinstance(v, (int, float, complex)) else dv.at(v[m.path], m.worst_index))}" for name, v in values)
        detail = Detail(form=form, check=check, mode=mode, argument=self.path, precision=precision, layout=self.case.layout_of(self.path),
                        tangent_seed=self.v_seed, cotangent_seed=self.u_seed, output="" if check == CONTRACTION else m.path,
                        index=tuple(m.worst_index), atol=m.atol, rtol=m.rtol, slack=slack, values=shown)
        sentence = (f"{mode} judged against {REFERENCES[check].replace('-', ' ')}; derivatives with respect to {self.path} "
                    f"({detail.layout}) in {precision} along a tangent seeded {self.v_seed}, cotangents seeded {self.u_seed}: "
                    + ", ".join(shown))
        spec = call.call_spec(self.prepared, self.ran, self.function_name)
        return calls.finding(self.case, kind="gradient_mismatch", reference=REFERENCES[check], op=self.op, summary=summary, mismatch=m,
                             call_spec=spec, detail=sentence, data=encode_detail(detail))

    # --- words ------------------------------------------------------------------------------

    def name(self) -> str:
        return f"{Context.short_op(self.op)} [{self.case.dtype}]"

    def argument(self) -> str:
        layout = self.case.layout_of(self.path)
        return self.path if layout == "contiguous" else f"a {layout} {self.path}"

    def _in(self, precision: str) -> str:
        return f" (in {precision})" if precision != self.case.dtype else ""


def farther(sides: dict, estimate: torch.Tensor, m: Mismatch) -> str:
    """The side (of two, by name) farther from float64's central difference ``estimate`` at ``m``'s worst element (NaN: farthest)."""
    e = dv.at(estimate, m.worst_index)
    error = {name: abs(dv.at(value[m.path], m.worst_index) - e) for name, value in sides.items()}
    return max(error, key=lambda name: math.inf if math.isnan(error[name]) else error[name])


def suspected(forward: dict, reverse: dict, fd: dict, m: Mismatch) -> str:
    """The first-order mode farther from finite differences at ``m``'s worst element."""
    return farther({FORWARD_MODE: forward, REVERSE_MODE: reverse}, fd[m.path][0], m)

