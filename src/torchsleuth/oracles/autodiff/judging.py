"""How the ``autodiff`` oracle judges one argument of one configuration.

Design note. ``Argument`` holds the call (in the case's dtype and widened to
float64), the argument differentiated, its seeds and what the finding will
need. ``first`` and ``second`` (see oracle.py's design note for the policy)
raise ``Skip`` when the argument cannot be judged, return a ``Finding``, or
None with their notes in ``notes``; findings.py words the finding.

Every comparison leaves out the elements where float64 finite differences
say the function has a kink along the tangent (helpers.finite_differences):
a disagreement there is no finding. Element-by-element comparisons of two
modes use the judge's rule for two rounded results (derivatives.by_rule);
comparisons with finite differences use ``helpers.FD_ATOL``, ``FD_RTOL`` and
the difference's own error estimate (derivatives.by_differences). In the
case's own dtype, two modes are compared only where one is far more wrong
than the other, each against its own value in float64 along the same
directions (helpers.lopsided): where both are as far off, the dtype is, and
no mode is; and where one is an infinity or NaN whose float64 computation
passes the dtype's range on the way (run.ranged.Largest), its own
intermediate overflowed, which the dtype allows.
"""

from __future__ import annotations

import math

import torch

from ... import dtypes
from ...cases.records import Case
from ...judge import calls, conditioning
from ...judge.records import Finding
from ...judge.verdict import one_line
from ...run import call
from ...run.ranged import Largest
from . import derivatives as dv
from . import helpers, ranges
from .findings import Findings, amount, farther, suspected, words
from .detail import (BOTH_MODES, DOUBLE_BACKWARD, FORWARD_MODE, FORWARD_OVER_REVERSE, REVERSE_MODE, SECOND_MODES, seeds)


class Skip(Exception):
    """This argument cannot be judged; the message says why."""


class Argument(Findings):
    """One argument of one configuration of a case, differentiated in every mode the case's form judges."""

    def __init__(self, subject, case: Case, prepared: call.Prepared, path: str, index: int, op: str, function_name: str):
        self.subject, self.case, self.prepared, self.path, self.op = subject, case, prepared, path, op
        self.function_name = function_name
        self.ran = calls.ran(prepared)  # the tensors before any call: what the finding's script rebuilds
        self.T = {p: t.detach() for p, t in prepared.tensors.items()}
        self.call = dv.as_call(prepared)
        self.wide = dv.widened(prepared)
        self.W, self.call_wide = self.wide.tensors, dv.as_call(self.wide)
        self.v_seed, self.u_seed = seeds(case.sample, index)
        self.narrow = self.wide.case.dtype != case.dtype  # the case's dtype is not float64 (complex128): judged in both
        self.notes: list[str] = []

    # --- autodiff:forward ---------------------------------------------------------------------

    def first(self) -> Finding | None:
        return self._confirmed(self._first)

    def second(self) -> Finding | None:
        return self._confirmed(self._second)

    def _confirmed(self, judge) -> Finding | None:
        """``judge``'s finding, made again where finite differences look for kinks at CONFIRM_SHIFTS points near x, not SHIFTS:
        a tie broken towards the same element by every one of a few shifts is no derivative (and its median is no finding)."""
        found = judge(helpers.SHIFTS)
        if found is None:
            return None
        self.notes = []
        return judge(helpers.CONFIRM_SHIFTS)

    def _first(self, count: int) -> Finding | None:
        v = helpers.tangent(self.W[self.path], self.v_seed)
        outs = self._outputs(self.call_wide, self.W)
        fd = self._differences(lambda: helpers.output_differences(self.call_wide, self.W, self.path, v, self._shifts(count)),
                               [p for p, _ in outs])
        fd = self._differentiable(fd, self.call_wide, self.W)
        fd = self._exact_fd(fd, ranges.FIRST, v, None)
        smooth = {p: s for p, (_, _, s) in fd.items()}
        u = [helpers.masked(c, smooth[p]) for c, (p, _) in zip(helpers.cotangents(outs, self.u_seed), outs)]
        forward = dict(self._mode(FORWARD_MODE, helpers.forward_mode, self.call_wide, self.W, self.path, v))
        gradient = self._mode(REVERSE_MODE, helpers.reverse_mode, self.call_wide, self.W, self.path, u)
        reverse = self._reverse_jvp(self.call_wide, self.W, v, u)
        found = self._first_wide(v, u, forward, gradient, reverse, fd)
        if found is not None or not self.narrow:
            return found
        return self._first_narrow(smooth, fd)

    def _first_wide(self, v, u, forward: dict, gradient, reverse: dict | None, fd: dict) -> Finding | None:
        """The float64 verdict: each mode against finite differences, then the two modes against each other."""
        off_forward = dv.by_differences(forward, fd)
        off_reverse = dv.by_differences(reverse, fd) if reverse is not None else None
        s_forward, size_forward = helpers.contraction([(c, helpers.masked(forward[p], fd[p][2])) for c, p in zip(u, forward)])
        s_reverse, size_reverse = helpers.contraction([(gradient, v)])
        allowed = helpers.CONTRACTION_ATOL + helpers.CONTRACTION_RTOL * (size_forward + size_reverse)
        finite = math.isfinite(s_forward) and math.isfinite(s_reverse)
        contracts = finite and abs(s_forward - s_reverse) <= allowed
        if not finite:
            self.notes.append(f"{self.path}: u.(Jv) = {words(s_forward)} and (u^T J).v = {words(s_reverse)} are not both finite: not compared")
        if reverse is not None:
            if off_reverse is not None and off_forward is None and (contracts or not finite):  # no first-order witness against it
                self.notes.append(f"{self.path}: J v by reverse mode twice is off finite differences at {list(off_reverse.worst_index)} "
                                  "where the contraction does not say reverse mode is: a second-derivative matter (autodiff:second)")
                return None
            if off_forward is not None and off_reverse is not None:
                found = self._modes(forward, reverse, fd, v, u, suspect=suspected(forward, reverse, fd, off_forward))
                return found if found is not None else self._finite(BOTH_MODES, off_forward, forward, fd)
            suspect = FORWARD_MODE if off_forward is not None else REVERSE_MODE if off_reverse is not None else ""
            return self._modes(forward, reverse, fd, v, u, suspect=suspect)
        if off_forward is not None:
            if finite and not contracts:
                return self._contraction(FORWARD_MODE, s_forward, s_reverse, allowed, fd, u)
            return self._finite(BOTH_MODES if contracts else FORWARD_MODE, off_forward, forward, fd)
        if finite and not contracts:
            return self._contraction(REVERSE_MODE, s_forward, s_reverse, allowed, fd, u)
        return None

    def _first_narrow(self, smooth: dict, fd: dict) -> Finding | None:
        """The verdict in the case's own dtype: forward mode's J v against reverse mode's, by the judge's rule."""
        v = helpers.tangent(self.T[self.path], self.v_seed)
        outs = self._outputs(self.call, self.T)
        smooth = {p: smooth[p] & torch.isfinite(o.detach()).cpu() for p, o in outs}  # a value that overflowed has no derivative to judge
        smooth = self._exact(smooth, ranges.FIRST, getattr(torch, self.case.dtype), v, None)
        u = [helpers.masked(c, smooth[p]) for c, (p, _) in zip(helpers.cotangents(outs, self.u_seed), outs)]
        forward = dict(self._mode(FORWARD_MODE, helpers.forward_mode, self.call, self.T, self.path, v))
        reverse = self._reverse_jvp(self.call, self.T, v, u)
        if reverse is None:
            return None
        m = dv.by_rule(self.prepared, dv.FIRST, self.path, v, u, forward, reverse, smooth, override=self.subject.override, op=self.op,
                       noise=self._noise(dv.FIRST, self.call, self.T, v, u),
                       allowance=self._allowance(reverse, self.case.dtype))
        if m is None:
            return None
        v64, u64 = helpers.widen(v, self.W[self.path]), [helpers.widen(c) for c in u]
        forward64 = dict(self._mode(FORWARD_MODE, helpers.forward_mode, self.call_wide, self.W, self.path, v64))
        reverse64 = self._reverse_jvp(self.call_wide, self.W, v64, u64)
        if reverse64 is None:
            return None
        smooth = self._lopsided(self._beyond(smooth, [forward64, reverse64]), helpers.lopsided(forward, reverse, forward64, reverse64))
        m = dv.by_rule(self.prepared, dv.FIRST, self.path, v, u, forward, reverse, smooth, override=self.subject.override, op=self.op,
                       noise=self._noise(dv.FIRST, self.call, self.T, v, u),
                       allowance=self._allowance(reverse, self.case.dtype))
        if m is None:
            return None
        slack = dv.slack_at(m, reverse[m.path])
        return self._modes_found(m, suspected(forward, reverse, fd, m), forward, reverse, fd, self.case.dtype, slack)

    # --- autodiff:second --------------------------------------------------------------------

    def _second(self, count: int) -> Finding | None:
        v = helpers.tangent(self.W[self.path], self.v_seed)
        outs = self._outputs(self.call_wide, self.W)
        u = helpers.cotangents(outs, self.u_seed)
        grad = f"grad[{self.path}]"
        fd = self._differences(lambda: helpers.gradient_differences(self.call_wide, self.W, self.path, v, self._shifts(count), u), [grad])
        fd = self._exact_fd(fd, ranges.SECOND, v, u)
        double = self._second_mode(DOUBLE_BACKWARD, helpers.double_backward, self.call_wide, self.W, u, v)
        over = self._second_mode(FORWARD_OVER_REVERSE, helpers.forward_over_reverse, self.call_wide, self.W, u, v) if self._fwgrad() else None
        if double is None and over is None:
            raise Skip("neither double backward nor forward over reverse can be taken: " + "; ".join(self.notes))
        off = {mode: dv.by_differences(value, fd) for mode, value in ((DOUBLE_BACKWARD, double), (FORWARD_OVER_REVERSE, over))
               if value is not None}
        for mode, m in off.items():
            if m is not None:
                other = over if mode == DOUBLE_BACKWARD else double
                return self._finite(mode, m, double if mode == DOUBLE_BACKWARD else over, fd, other=other)
        smooth = {grad: fd[grad][2]}
        if double is not None and over is not None:
            found = self._second_modes(self.wide, self.call_wide, double, over, smooth, fd, u, v)
            if found is not None or not self.narrow:
                return found
            v, outs = helpers.tangent(self.T[self.path], self.v_seed), self._outputs(self.call, self.T)
            u = helpers.cotangents(outs, self.u_seed)
            double = self._second_mode(DOUBLE_BACKWARD, helpers.double_backward, self.call, self.T, u, v)
            over = self._second_mode(FORWARD_OVER_REVERSE, helpers.forward_over_reverse, self.call, self.T, u, v)
            if double is not None and over is not None:
                gradient = self._mode(REVERSE_MODE, helpers.reverse_mode, self.call, self.T, self.path, u)
                smooth = {grad: smooth[grad] & torch.isfinite(gradient).cpu()}  # a gradient that overflowed has no derivative to judge
                smooth = self._exact(smooth, ranges.SECOND, getattr(torch, self.case.dtype), v, u)
                return self._second_modes(self.prepared, self.call, double, over, smooth, fd, u, v)
        return None

    def _second_modes(self, prepared, call_of, double: dict, over: dict, smooth: dict, fd: dict, u, v) -> Finding | None:
        precision = prepared.case.dtype
        m = dv.by_rule(prepared, dv.SECOND, self.path, v, u, double, over, smooth, override=self.subject.override, op=self.op,
                       noise=self._noise(dv.SECOND, call_of, prepared.tensors, v, u),
                       allowance=self._allowance(over, precision))
        if m is not None and prepared is not self.wide:  # in the case's dtype: one mode must be off its own float64 value
            v64, u64 = helpers.widen(v, self.W[self.path]), [helpers.widen(c) for c in u]
            double64 = self._second_mode(DOUBLE_BACKWARD, helpers.double_backward, self.call_wide, self.W, u64, v64)
            over64 = self._second_mode(FORWARD_OVER_REVERSE, helpers.forward_over_reverse, self.call_wide, self.W, u64, v64)
            if double64 is None or over64 is None:
                return None
            smooth = self._lopsided(self._beyond(smooth, [double64, over64]), helpers.lopsided(double, over, double64, over64))
            smooth = self._in_range(smooth, {DOUBLE_BACKWARD: double, FORWARD_OVER_REVERSE: over}, {
                DOUBLE_BACKWARD: lambda: helpers.double_backward(self.call_wide, self.W, self.path, u64, v64),
                FORWARD_OVER_REVERSE: lambda: helpers.forward_over_reverse(self.call_wide, self.W, self.path, u64, v64)})
            m = dv.by_rule(prepared, dv.SECOND, self.path, v, u, double, over, smooth, override=self.subject.override, op=self.op,
                           noise=self._noise(dv.SECOND, call_of, prepared.tensors, v, u),
                           allowance=self._allowance(over, precision))
        if m is None:
            return None
        estimate = fd[m.path][0]
        mode = farther({DOUBLE_BACKWARD: double, FORWARD_OVER_REVERSE: over}, estimate, m)
        values = ((DOUBLE_BACKWARD, double), (FORWARD_OVER_REVERSE, over), ("finite differences", {m.path: estimate}))
        summary = (f"second derivative of {self.name()} with respect to {self.argument()}: double backward differs from forward over "
                   f"reverse by {amount(m.max_abs_err)} (allowed {amount(m.allowed, 'none')}) at element {list(m.worst_index)}{self._in(precision)}; "
                   f"float64 finite differences give {words(dv.at(estimate, m.worst_index))}, siding with "
                   f"{FORWARD_OVER_REVERSE if mode == DOUBLE_BACKWARD else DOUBLE_BACKWARD}")
        return self._finding(SECOND_MODES, mode, summary, m, values, precision=precision, slack=dv.slack_at(m, over[m.path]))

    # --- the pieces -------------------------------------------------------------------------

    def _outputs(self, call_of, T) -> list:
        try:
            outs = helpers.outputs(call_of(T))
        except Exception as e:
            raise Skip(f"the call raises: {one_line(e)}") from None
        if not outs:
            raise Skip("the call has no floating or complex output to differentiate")
        return outs

    def _differentiable(self, fd: dict, call_of, T) -> dict:
        """``fd`` with the outputs autograd defines no derivative for left unjudged (their smooth masks emptied): batch
        norm's saved statistics depend on the input, but no mode differentiates them, by definition."""
        U = dict(T)
        with torch.enable_grad():
            U[self.path] = T[self.path].detach().clone().requires_grad_(True)
            try:
                outs = dict(helpers.outputs(call_of(U)))
            except Exception:
                return fd
        return {p: (e, x, s if p in outs and outs[p].requires_grad else torch.zeros_like(s)) for p, (e, x, s) in fd.items()}

    def _differences(self, make, paths: list[str]) -> dict:
        """Float64 central differences by leaf path; Skip when nothing is smooth (every element at a kink)."""
        try:
            found = dict(zip(paths, make()))
        except Exception as e:
            raise Skip(f"the call on moved copies raises: {one_line(e)}") from None
        total = sum(s.numel() for _, _, s in found.values())
        infinite = sum(int((~torch.isfinite(e)).sum()) for e, _, _ in found.values())
        kinks = sum(int((~s & torch.isfinite(e)).sum()) for e, _, s in found.values())
        left = []
        if kinks:
            left.append(f"at a kink: {kinks} of {total} element(s) not differentiable along the tangent with respect to {self.path} "
                        "(float64 one-sided differences disagree or are unstable)")
        if infinite:
            left.append(f"not finite: {infinite} of {total} element(s) whose float64 differences are NaN or infinite")
        if total and kinks + infinite == total:
            raise Skip("; ".join(left) + ": nothing left to judge")
        self.notes += [f"{words}: not judged there" for words in left]
        return found

    def _mode(self, mode: str, helper, *args):
        try:
            return helper(*args)
        except Exception as e:
            raise Skip(f"{mode} raises: {one_line(e)}") from None

    def _reverse_jvp(self, call_of, T, v, u) -> dict | None:
        try:
            return dict(helpers.reverse_jvp(call_of, T, self.path, v, u))
        except Exception as e:
            self.notes.append(f"{self.path}: J v by reverse mode twice raises ({one_line(e)}): the modes compared as contractions")
            return None

    def _second_mode(self, mode: str, helper, call_of, T, u, v) -> dict | None:
        try:
            return {f"grad[{self.path}]": helper(call_of, T, self.path, u, v)}
        except Exception as e:
            self.notes.append(f"{self.path}: {mode} raises: {one_line(e)}")
            return None

    def _noise(self, order: str, call_of, T: dict, v, u):
        """``noise()``: the rounding noise of both modes' computations of this order, summed by leaf (derivatives.noise)."""
        path, grad = self.path, f"grad[{self.path}]"
        if order == dv.FIRST:
            modes = (lambda T, v, u: dict(helpers.forward_mode(call_of, T, path, v)),
                     lambda T, v, u: dict(helpers.reverse_jvp(call_of, T, path, v, u)))
        else:
            modes = (lambda T, v, u: {grad: helpers.double_backward(call_of, T, path, u, v)},
                     lambda T, v, u: {grad: helpers.forward_over_reverse(call_of, T, path, u, v)})

        def measure() -> dict:
            total: dict = {}
            for compute in modes:
                try:
                    moves = dv.noise(compute, {p: t for p, t in T.items()}, v, u)
                except Exception:  # a nudged input the call refuses: no noise measured, none allowed
                    continue
                for p, n in moves.items():
                    total[p] = total[p] + n if p in total else n
            return total

        return measure

    def _allowance(self, leaves: dict, dtype: str) -> dict:
        """The second-order slack by leaf at a conditioned matrix of the case's edits (judge.conditioning), in ``dtype``."""
        return conditioning.allowance(self.case.op, self.case.edits, self.T, leaves, getattr(torch, dtype))

    def _exact(self, smooth: dict, order: str, dtype: torch.dtype, v, u) -> dict:
        """``smooth`` without the elements where the exact derivative, or a product a mode takes on the way, lies outside
        ``dtype``'s normal range (ranges.outside); noted where any."""
        out = ranges.outside(self.case.op, order, self.W[self.path], v, u[0] if u and len(u) == 1 else None, dtype)
        if out is None or not bool(out.any()):
            return smooth
        found = {p: s & ~out if s.shape == out.shape else s for p, s in smooth.items()}
        left = sum(int((smooth[p] & ~found[p]).sum()) for p in smooth)
        if left:
            self.notes.append(f"{self.path}: {left} element(s) where the exact derivative (mpmath) or its product with the tangent "
                              f"or cotangent lies outside {dtypes.name(dtype)}'s normal range: no verdict there")
        return found

    def _exact_fd(self, fd: dict, order: str, v, u) -> dict:
        """``fd`` (path -> estimate, error, smooth) with ``_exact``'s rule in float64 applied to its smooth masks."""
        smooth = self._exact({p: s for p, (_, _, s) in fd.items()}, order, torch.float64, v, u)
        return {p: (e, x, smooth[p]) for p, (e, x, _) in fd.items()}

    def _beyond(self, smooth: dict, wide: list) -> dict:
        """``smooth`` without the elements where a mode's float64 value lies outside the case's dtype's normal range
        (ranges.beyond: no exact function needed); noted where any."""
        out = ranges.beyond(wide, getattr(torch, self.case.dtype))
        found = {p: s & ~out[p] if p in out and out[p].shape == s.shape else s for p, s in smooth.items()}
        left = sum(int((smooth[p] & ~found[p]).sum()) for p in smooth)
        if left:
            self.notes.append(f"{self.path}: {left} element(s) whose derivative in float64 lies outside {self.case.dtype}'s normal range: "
                              "no verdict there")
        return found

    def _lopsided(self, smooth: dict, lopsided: dict) -> dict:
        """``smooth`` where one mode is off its float64 value far more than the other (derivatives.lopsided); noted where not."""
        even = sum(int((smooth[p] & ~lopsided[p]).sum()) for p in smooth)
        if even:
            self.notes.append(f"{self.path}: in {self.case.dtype}, both modes as far from their float64 values at {even} element(s): "
                              "rounding of the dtype, not judged there")
        return {p: smooth[p] & lopsided[p] for p in smooth}

    def _in_range(self, smooth: dict, narrow: dict, wide: dict) -> dict:
        """``smooth`` without the elements where a mode in the case's dtype is an infinity or NaN, finite in float64, whose
        float64 computation (``wide[mode]()``) makes an intermediate past the dtype's largest value: that mode's own way of
        computing overflows the dtype (pow's x**y * log(x)**2 past 65504 in forward over reverse, not in double backward),
        as the precision reference excuses a call's intermediates (run.ranged)."""
        dtype = getattr(torch, self.case.dtype)
        limit = torch.finfo(dtype.to_real() if dtype.is_complex else dtype).max
        found = dict(smooth)
        for mode, values in narrow.items():
            grad = f"grad[{self.path}]"
            value = values.get(grad) if values else None
            if value is None or grad not in found or bool(torch.isfinite(value.detach()).all()):
                continue
            watch = Largest()
            try:
                with watch:
                    exact = wide[mode]()
            except Exception:
                continue
            over = ~torch.isfinite(value.detach().cpu()) & torch.isfinite(exact.detach().cpu())
            if bool(over.any()) and watch.largest() > limit:
                self.notes.append(f"{self.path}: {mode} in float64 passes {self.case.dtype}'s range on the way, and gives an infinity or "
                                  f"NaN in {self.case.dtype} at {int(over.sum())} element(s) where float64 is finite: not judged there")
                found[grad] = found[grad] & ~over
        return found

    def _shifts(self, count: int) -> list:
        return helpers.shifts(self.W[self.path], self.v_seed, count)

    def _fwgrad(self) -> bool:
        return bool(getattr(self.subject.entry, "supports_fwgrad_bwgrad", False))
