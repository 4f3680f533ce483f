"""The repro script of an ``alias`` finding: the aliased call against the same call unaliased.

Design note. The generic script (scripts.checks) rebuilds every argument in
a storage of its own, which is exactly what an aliasing bug needs not to
have. This one rebuilds the storage the finding's arguments shared and views
it again (the very same tensor where the form passes one tensor twice), then
(``helpers.check``)

1. makes the same call on unaliased contiguous copies of the values every
   argument held (fresh out= tensors, a clone of self): the right answer,
   since the oracle reports only where that call gives the functional result;
2. makes the aliased call: if it raises, PyTorch refused the aliasing, which
   is always right (exit 0);
3. compares each written tensor with the right answer (a tensor given for two
   outputs must equal one of the two results entirely), elementwise within
   the finding's atol and rtol, and looks for writes outside the written
   views in their storages; prints the wrong and the right values.

Exit status: 1 while the bug is present, 0 once it is gone, 2 when the check
cannot be made (the unaliased call raises). What the script needs of the
sweep (the aliasing, the worker's threads, the ``--import`` modules, which it
imports first) is the finding's ``Detail`` record; the rest is the repro
kit's pieces (scripts.parts) and helpers (scripts.kit, and this oracle's own
in ``helpers``, copied in as real code).
"""

from __future__ import annotations

import dataclasses
import inspect

from ...cases.records import Case
from ...judge.plugin import decode_detail
from ...judge.records import Finding
from ...run.records import CallSpec
from ...scripts import parts
from . import helpers
from .detail import Detail
from .forms import SAME_TENSOR, Form


def script(finding: Finding, torch_version: str) -> str | None:
    """The script of one alias finding, or None when its call cannot be written (the generic script says why)."""
    spec = parts.writable_call(finding)
    if spec is None:
        return None
    detail = detail_of(finding)
    form = detail.form
    view, source = _alias(form)
    if view not in {t.path for t in spec.tensors} or source not in {t.path for t in spec.tensors}:
        return None
    constants = [
        f"IMPORTS = {detail.imports!r}  # the sweep's --import modules, imported first: the script needs them too",
        f"THREADS = {detail.threads!r}  # intra-op threads of the sweep's worker: which elements a kernel reads after "
        "writing them can depend on it",
        f"ALIASING = {form.words()!r}  # the aliased call must raise (refusing an aliasing is always right) "
        "or give the unaliased result",
        f"CALL = {parts.call_source(spec)!r}",
        *parts.tolerance_lines(finding),
        *parts.constants(spec),
        f"SHARED = {(form.written, form.read) if form.name == 'shared-out' else ()!r}  "
        "# one tensor for two outputs: it must hold one result entirely",
    ]
    lines = parts.preamble(finding, spec, torch_version, helpers.KIT, constants)
    lines += ["", "", "\n\n\n".join(inspect.getsource(f).rstrip("\n") for f in helpers.SOURCE)]
    lines += parts.function_lines(spec)
    lines += _tensors_function(spec, form, view, source)
    lines += [
        "", "", "def main():",
        "    load_imports()",
        "    if THREADS:",
        "        torch.set_num_threads(THREADS)",
        "    return check(tensors(), call)",
    ]
    lines += parts.data_block(dataclasses.replace(spec, tensors=tuple(t for t in spec.tensors if t.path != view)))
    lines += parts.footer()
    return "\n".join(lines)


def detail_of(finding: Finding) -> Detail:
    """The finding's ``Detail``; for one stored before records, the aliasing its case id names (nothing else known)."""
    return decode_detail(Detail, finding) or Detail(form=Form.parse(Case.parse(finding.case_id).oracle))


def _alias(form: Form) -> tuple[str, str]:
    """(the path rebuilt as a view, the path whose storage it views)."""
    if form.name in ("out-is-input", "out-overlaps-input"):
        return form.written, form.read
    return form.read, form.written


def _tensors_function(spec: CallSpec, form: Form, view: str, source: str) -> list[str]:
    """``tensors()``: every argument but ``view`` rebuilt exactly, then ``view`` made on ``source``'s storage."""
    lines = ["", "", "def tensors():", '    """The arguments exactly as the kernel saw them, aliasing included."""', "    T = {}"]
    for seed, t in enumerate(spec.tensors):
        if t.path == view:
            continue
        data = f"DATA[{t.path!r}]" if t.data is not None else f"seed={seed}"
        lines.append(f"    T[{t.path!r}] = rebuild({t.dtype!r}, {t.device!r}, {t.storage_numel}, {tuple(t.shape)!r}, "
                     f"{tuple(t.stride)!r}, {t.storage_offset}, {data})")
    aliased = next(t for t in spec.tensors if t.path == view)
    if form.name in SAME_TENSOR:
        lines.append(f"    T[{view!r}] = T[{source!r}]  # the very same tensor")
    else:
        lines.append(f"    T[{view!r}] = T[{source!r}].as_strided({tuple(aliased.shape)!r}, {tuple(aliased.stride)!r}, "
                     f"{aliased.storage_offset})  # a view of {source}'s storage")
    lines.append("    return T")
    return lines
