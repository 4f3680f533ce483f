"""The edit verbs the searches add to ``run.edits``, by verb.

Each is ``apply(sample, rest) -> sample``, ``rest`` being what follows the
verb's colon: a pure transform of an OpInfo sample, as every edit is. A verb
in ``TAKE_OP`` also takes ``op=`` (the case's op): its transform reads the
op's own call, traced (``internal``). The modules that define them must not
import ``run.edits`` (which dispatches here); they work on samples through
``run.tree``.
"""

from __future__ import annotations

from typing import Callable

from . import arguments, draws, internal, overloads, values

VERBS: dict[str, Callable] = {
    values.VERB: values.apply,
    arguments.VERB: arguments.apply,
    overloads.VERB: overloads.apply,
    internal.VERB: internal.apply,
    draws.VERB: draws.apply,
}
# The form of each verb's edit, for the error message of an unknown edit.
FORMS: tuple[str, ...] = (values.FORM, arguments.FORM, overloads.FORM, internal.FORM, draws.FORM)
# Verbs whose edit re-runs the op itself (the internal search re-traces its call), so they are given its name too.
TAKE_OP = frozenset({internal.VERB})


def apply(verb: str, sample, rest: str, *, op: str = ""):
    """``sample`` with the edit ``VERB:REST`` made; ``op`` (the case's op) for the verbs that call it."""
    if verb in TAKE_OP:
        return VERBS[verb](sample, rest, op=op)
    return VERBS[verb](sample, rest)
