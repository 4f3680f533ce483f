"""Which of two disagreeing results float64 sides with, at the element where they part.

Design note. When two implementations disagree (two CPU capabilities, eager
and compiled), a reader wants to know which one to distrust. The float64
reference answers it, but only at the element the mismatch names: the
largest error over the whole result is set by rounding of the largest
values, not by the bug. The answer is phrased as a clause for the finding's
summary, and left out when float64 cannot tell them apart (neither is
twice as far as the other) or was not computed.
"""

from __future__ import annotations

import math

import torch

from . import compare as cmp
from .records import Mismatch


def clause(refs, mismatch: Mismatch, path: str, sides: dict[str, object], *, reference: str = "float64") -> str:
    """``"; float64 is near compiled (off by 7e-06), not eager (0.0038)"``, or "" when it cannot say.

    ``sides`` maps each side's name to its result's leaves by path (as ``cmp.flatten`` makes them).
    """
    if mismatch.attribute != "values" or not refs.float64.ok:
        return ""
    exact = dict(cmp.flatten(refs.float64.value)).get(path)
    errors = {}
    for name, leaves in sides.items():
        value, base = cmp.dense(dict(leaves).get(path)), cmp.dense(exact)
        if not (isinstance(value, torch.Tensor) and isinstance(base, torch.Tensor)) or value.shape != base.shape:
            return ""
        index = mismatch.worst_index if value.dim() else ()
        a = value.detach().cpu()[index] if index else value.detach().cpu().reshape(())
        e = base.detach().cpu()[index] if index else base.detach().cpu().reshape(())
        work = torch.complex128 if a.is_complex() or e.is_complex() else torch.float64
        errors[name] = float(torch.nan_to_num((a.to(work) - e.to(work)).abs(), nan=math.inf))
    near, far = sorted(errors, key=errors.get)
    if not errors[far] > 2 * errors[near]:
        return ""
    return f"; {reference} is near {near} (off by {errors[near]:.3g}), not {far} ({errors[far]:.3g})"
