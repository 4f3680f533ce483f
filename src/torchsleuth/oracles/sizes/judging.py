"""How the ``sizes`` oracle judges a configuration, and how it words an outcome.

Design note. ``Check`` is one case's state while its configurations are made
(sizes.probes): the call, the tolerance, the slack of two rounded results
(measured once per probe), and ``compare``, the policy of the oracle's
design note (sizes.oracle): bits first, then a change of class, then the
judge's tolerance rule. ``outcome`` turns the verdicts into a pass (saying
how far the bits were apart within tolerance) or one finding, whose summary
names the first wrong configuration and the wrong and right ones in a few
words (``places``), and whose ``Detail`` (sizes.detail) is what the repro
script reads back.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ...cases import opinfo
from ...cases.records import VARIANT_WORDS
from ...judge import calls
from ...judge import compare as cmp
from ...judge.context import bits_equal
from ...judge.verdict import one_line
from ...judge.plugin import encode_detail
from ...judge.records import Mismatch, Outcome
from ...judge.tolerance import table
from ...run import call, lengths
from .detail import Detail


class Skip(Exception):
    """The case is not this oracle's to judge; the message says why."""


@dataclass(frozen=True, slots=True)
class Place:
    """Where the oracle put an element: "length", "offset", a layout form or "sample" (pointwise), "outer" or "inner" (rows)."""

    kind: str  # one of the above; a layout form is a key of lengths.FORM_WORDS
    size: int  # the length, or the rows in the batch
    label: str  # "length 9", "strided length 9 (every other element)", "a batch of 9 rows (innermost in memory)"
    argument: str = ""  # the argument a layout form lays out alone ("transposed-first")


@dataclass(frozen=True, slots=True)
class Verdict:
    """One configuration judged: its mismatch (None: fine), and the largest bitwise distance seen."""

    place: Place
    mismatch: Mismatch | None = None
    ulps: int = 0
    nan_bits: bool = False  # NaN on both sides, with other sign or payload bits
    slack: float = 0.0  # what the rule allowed beyond the table at the mismatch's worst element


class Check:
    def __init__(self, subject, prepared: call.Prepared, op: str):
        self.subject = subject
        self.case = subject.case
        self.prepared = prepared
        self.op = op
        self.function_name = opinfo.public_name(subject.entry, "functional")
        self._slack: dict[bool, dict] = {}
        self.notes: list[str] = []  # what a passing outcome's reason says besides the bits
        self.signed_zero = True  # +0 against -0 is a change of class (not where the op picks between tied zeros)

    def name(self) -> str:
        short = self.op.split(".")[1] if self.op.startswith("aten.") else self.op
        return f"{short}{VARIANT_WORDS[self.case.variant]} [{self.case.dtype}]"

    def call(self, tensors: dict):
        try:
            return calls.run(self.prepared, tensors)
        except Exception as e:
            raise Skip(f"the oracle's call raised where the sample's did not: {one_line(e)}") from None

    def tolerance(self, dtype: torch.dtype):
        return table(dtype, self.subject.override)

    def slack_of(self, judged: calls.Judged, jumps: bool) -> dict:
        """The rule's slack for two rounded results of ``judged``'s call (made once per probe)."""
        if jumps not in self._slack:
            self._slack[jumps] = judged.context.slack(2.0, jumps=jumps) or {}
        return self._slack[jumps]

    def compare(self, place: Place, actual, expected, slack, *, signed_zero: bool) -> Verdict:
        """One configuration's leaves against the same values alone (see the policy in sizes.oracle's design note)."""
        label = place.label
        if [p for p, _ in actual] != [p for p, _ in expected]:
            raise Skip(f"at {label} the result has other parts ({[p for p, _ in actual]})")
        differing, hard, ulps, nan_bits = False, None, 0, False
        for (path, a), (_, e) in zip(actual, expected):
            if not isinstance(a, torch.Tensor) or a.shape != e.shape or a.dtype != e.dtype:
                raise Skip(f"at {label} {path} is not shaped like the elements alone (not elementwise)")
            if cmp.compare_leaf(path, a, e, tolerance=self.tolerance, bitwise=True) is None:
                continue
            differing = True
            changed = calls.class_change(a, e, signed_zero=signed_zero)
            if bool(changed.any()) and hard is None:
                hard = self._class_mismatch(path, a, e, changed)
            if a.is_floating_point() or a.is_complex():
                ulps = max(ulps, int(calls.ulps(a, e).max()))
                nan_bits |= bool((torch.isnan(a.cpu()) & torch.isnan(e.cpu()) & ~bits_equal(a, e)).any())
        if not differing:
            return Verdict(place)
        if hard is None:
            found = cmp.compare(actual, expected, tolerance=self.tolerance)
            for jumps in (False, True):  # as the judge does: the jump probe only if needed
                if found:
                    found = cmp.compare(actual, expected, tolerance=self.tolerance, slack=slack(jumps) or None)
            hard = found[0] if found else None
        return Verdict(place, hard, ulps, nan_bits, _slack_at(hard, expected))

    def _class_mismatch(self, path, a, e, changed) -> Mismatch:
        flat = int(changed.reshape(-1).to(torch.uint8).argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
        tol = self.tolerance(a.dtype)
        return Mismatch(path=path, attribute="values", expected=_fmt(e.reshape(-1)[flat]), actual=_fmt(a.reshape(-1)[flat]),
                        mismatched=int(changed.sum()), numel=a.numel(), worst_index=index, max_abs_err=None,
                        atol=tol.atol if a.is_floating_point() or a.is_complex() else 0.0,
                        rtol=tol.rtol if a.is_floating_point() or a.is_complex() else 0.0, allowed=0.0)

    def outcome(self, verdicts: list[Verdict], *, reference: str, detail: Detail) -> Outcome:
        """A pass saying how far the bits were apart, or the finding of the first wrong configuration.

        ``detail`` says how the configurations were made; the finding's copy
        adds the slack at the worst element and the wrong configurations.
        """
        bad = [v for v in verdicts if v.mismatch is not None]
        if not bad:
            noisy = [v for v in verdicts if v.ulps or v.nan_bits]
            parts = []
            if any(v.ulps for v in noisy):
                worst = max(noisy, key=lambda v: v.ulps)
                parts.append(f"bits differ by up to {worst.ulps} ULP between {worst.place.label} and {reference}")
            nans = [v for v in noisy if v.nan_bits]
            if nans:
                more = f" and {len(nans) - 1} more" if len(nans) > 1 else ""
                parts.append(f"NaNs differ in sign or payload bits in {nans[0].place.label}{more}")
            reason = f"{'; '.join(parts)}, within tolerance ({len(noisy)} of {len(verdicts)} configurations)" if parts else ""
            reason = "; ".join(part for part in (reason, *self.notes) if part)
            return Outcome(case=self.case, status="pass", reason=reason)
        m = bad[0].mismatch
        at = f" {list(m.worst_index)}" if m.worst_index else ""
        good = [v for v in verdicts if v.mismatch is None]
        summary = (f"{self.name()} gives an element another value in {bad[0].place.label} than in {reference}: "
                   f"{m.path}{at} is {m.actual} there and {m.expected} alone; wrong {places(bad)}"
                   + (f"; right {places(good)}" if good else ""))
        wrong = tuple(v.place.label for v in bad)
        prose = (f"rows stacked along a {'new first dim' if detail.front else 'new last dim'}; " if detail.reduction else "") \
            + "wrong in: " + "; ".join(wrong)
        data = dataclasses.replace(detail, slack=bad[0].slack, wrong=wrong)
        spec = call.call_spec(self.prepared, calls.ran(self.prepared), self.function_name)
        finding = calls.finding(self.case, kind="size_variance", reference="size", op=self.op, summary=summary, mismatch=m,
                                call_spec=spec, detail=prose, data=encode_detail(data))
        return Outcome(case=self.case, status="finding", findings=(finding,))


def form_words(form: str, n: int | str, first: str) -> str:
    """A layout form at length ``n``: "strided length 9 (every other element)"; ``n`` a string: several lengths."""
    before, after = lengths.FORM_WORDS[form]
    many = isinstance(n, str) and "," in n
    return f"{before}length{'s' * many} {n}{after.format(n='n' if many else n, first=first)}"


def places(verdicts: list[Verdict]) -> str:
    """The configurations in a few words: "at lengths 8, 9, 16 and at strided lengths 9, 17 (every other element)
    and at storage offset 3", "in batches of 9, 17 rows"."""
    kinds = {v.place.kind for v in verdicts}
    sizes = sorted({v.place.size for v in verdicts if v.place.kind in ("length", "outer", "inner")})
    parts = []
    if "length" in kinds:
        parts.append(f"at length{'s' if len(sizes) > 1 else ''} {', '.join(map(str, sizes))}")
    for form in lengths.FORM_WORDS:
        of_form = [v for v in verdicts if v.place.kind == form]
        if of_form:
            n = ", ".join(map(str, sorted({v.place.size for v in of_form})))
            parts.append("at " + form_words(form, n, of_form[0].place.argument))
    if kinds & {"outer", "inner"}:
        only = "" if {"outer", "inner"} <= kinds else f" (rows {'innermost' if 'inner' in kinds else 'outermost'} in memory only)"
        parts.append(f"in batches of {', '.join(map(str, sizes))} rows{only}")
    parts += [v.place.label.removeprefix(f"length {v.place.size} ") if v.place.kind == "offset" else f"in {v.place.label}"
              for v in verdicts if v.place.kind in ("offset", "sample")]
    return " and ".join(parts)


def _slack_at(m: Mismatch | None, expected) -> float:
    """What the rule allowed beyond ATOL + RTOL * |expected| at ``m``'s worst element: the script's one ``SLACK``."""
    if m is None or m.allowed is None or not math.isfinite(m.allowed) or m.attribute != "values":
        return 0.0
    value = dict(expected)[m.path].detach().cpu()[m.worst_index].item()
    return max(0.0, m.allowed - m.atol - m.rtol * abs(value))


def _fmt(x: torch.Tensor) -> str:
    value = x.item()
    if isinstance(value, float):
        return "-0.0" if value == 0 and str(value).startswith("-") else f"{value:.9g}"
    if isinstance(value, complex):
        return f"({value.real:.9g}{value.imag:+.9g}j)"
    return str(value)
