"""The edit verbs the searches add to ``run.edits``, by verb.

Each is ``apply(sample, rest) -> sample``, ``rest`` being what follows the
verb's colon: a pure transform of an OpInfo sample, as every edit is. The
modules that define them must not import ``run.edits`` (which dispatches
here); they work on samples through ``run.tree``.
"""

from __future__ import annotations

from typing import Callable

from . import arguments, overloads, values

VERBS: dict[str, Callable] = {
    values.VERB: values.apply,
    arguments.VERB: arguments.apply,
    overloads.VERB: overloads.apply,
}
# The form of each verb's edit, for the error message of an unknown edit.
FORMS: tuple[str, ...] = (values.FORM, arguments.FORM, overloads.FORM)
