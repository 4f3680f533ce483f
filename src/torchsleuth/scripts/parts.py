"""The pieces a repro script is assembled from: lists of source lines.

Design note. A script is written for a reader: a header that says what was
found and how to run it (``header``), the imports and the constants
(``preamble``, which copies in the kit's helpers), the call written out
literally from the finding's ``CallSpec`` and the reference it was judged
against (``function_lines``, ``reference_source``), the tensors rebuilt
exactly (``tensors_function``), a ``main`` (``start_main`` ... ``verdict``)
and the tensors' bytes at the bottom (``data_block``), then ``footer``.

Every piece returns a list of lines (no trailing newline): the check writers
(scripts.checks) and the oracles' own scripts concatenate them with lines of
their own. Nothing here decides which property a script checks.
"""

from __future__ import annotations

import ast
import base64
import math

import torch

from .._version import __version__
from ..judge.plugin import decode_detail
from ..judge.records import Finding
from ..judge.tolerance import table
from ..workers import faults
from ..run.call import CALL_SEED
from ..run.records import CallSpec
from . import kit

LINE = 76  # width of the inline data lines
# What every script imports, whatever helpers it holds (the footer needs sys and traceback).
BASE_IMPORTS = ("base64", "sys", "traceback", "zlib")


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def header(finding: Finding, call: CallSpec | None, torch_version: str) -> list[str]:
    """What was found, where, and how to run the script: comment lines."""
    m = finding.mismatch
    lines = [
        f"# torchsleuth repro for finding {finding.id}",
        "#",
        f"#   op         {finding.op} (OpInfo {finding.opinfo!r}), {finding.variant} variant, {finding.dtype} on {finding.device}",
        f"#   kind       {finding.kind}, judged against the {finding.reference} reference",
        f"#   finding    {one_line(finding.summary)}",
    ]
    if m is not None:
        lines.append(f"#   mismatch   {one_line(m.describe())}")
    for spec in call.tensors if call else ():
        lines.append(
            f"#   argument   {spec.path}: {spec.layout}, shape {list(spec.shape)}, stride {list(spec.stride)}, "
            f"offset {spec.storage_offset}"
        )
    lines += [
        f"#   found with torch {torch_version}, torchsleuth {__version__}",
        f"#   case       {finding.case_id}",
        "#",
        f"# Run it with the torch under test:  python {finding.id}.py",
        "# Exit status: 1 while the bug is present, 0 once it is gone, 2 when it cannot be checked.",
        "# It needs only torch.",
        "",
    ]
    return lines


def died_in_steps(finding: Finding, torch_version: str, steps: str) -> str:
    """The script of a crash or hang in an oracle's own calls (``steps``: which calls it makes), which a script of the
    case's call would not reproduce: it names the place the worker died, where the pool recorded it (workers.faults)."""
    place = faults.placed(finding.detail)
    if place:
        why = f"the worker died in one of {steps}, at {place} (the innermost frames of torchsleuth's code)"
    else:
        why = f"the worker died in one of {steps}; where was not recorded"
    return no_repro(finding, torch_version, why)


def no_repro(finding: Finding, torch_version: str, why: str) -> str:
    """The whole script for a finding that cannot be checked: it says why and exits 2."""
    lines = header(finding, finding.call, torch_version)
    lines += [
        f"# No repro could be generated: {one_line(why)}.",
        "",
        "import sys",
        "",
        f"print({('torchsleuth finding ' + finding.id + ': ' + one_line(finding.summary))!r})",
        f"print({('no repro could be generated: ' + one_line(why))!r}, file=sys.stderr)",
        "sys.exit(2)",
        "",
    ]
    return "\n".join(lines)


def writable_call(finding: Finding) -> CallSpec | None:
    """The finding's call when a script can make it; None when it cannot be written (the generic script says why)."""
    call = finding.call
    return None if call is None or call.why_not or not call.function else call


def no_record(finding: Finding, torch_version: str, what: str) -> str:
    """The script of an oracle finding stored without its Detail record (by a torchsleuth before records)."""
    return no_repro(finding, torch_version, f"the finding carries no record of {what} (it was stored by an older torchsleuth): run the sweep again")


def recorded(finding: Finding, detail_type: type, torch_version: str, what: str) -> tuple[CallSpec | None, object, str | None]:
    """An oracle script's start: ``(call, detail, None)``, or ``(None, None, answer)`` when there is nothing to write, where
    ``answer`` is None when the call cannot be written (the generic script says why) or the no-record script (``what``
    the record would have said)."""
    call = writable_call(finding)
    if call is None:
        return None, None, None
    detail = decode_detail(detail_type, finding)
    if detail is None:
        return None, None, no_record(finding, torch_version, what)
    return call, detail, None


def tolerance(finding: Finding, *, from_mismatch: bool = True) -> tuple[float, float]:
    """(atol, rtol) a script compares values with: the mismatch's own where it compared values, else the dtype's table."""
    m = finding.mismatch
    if from_mismatch and m is not None and m.attribute == "values":
        return m.atol, m.rtol
    allowed = table(getattr(torch, finding.dtype))
    return allowed.atol, allowed.rtol


def preamble(finding: Finding, call: CallSpec, torch_version: str, helpers: tuple[str, ...], constants: list[str],
             imports: tuple[str, ...] = ()) -> list[str]:
    """Header, imports, ``CALL_SEED`` and ``SUMMARY``, ``constants``, then the kit's ``rebuild``,
    ``describe`` and ``helpers`` (names of scripts.kit functions), with what they use."""
    names = ("rebuild", "describe", *helpers)
    modules = sorted(set(BASE_IMPORTS) | set(imports) | set(kit.imports(*names)))
    lines = header(finding, call, torch_version)
    lines += [f"import {name}" for name in modules]
    lines += [
        "",
        "import torch",
        "",
        f"CALL_SEED = {CALL_SEED!r}  # torchsleuth seeds every call with this",
        f"SUMMARY = {one_line(finding.summary)!r}",
    ]
    lines += constants
    lines += ["", "", kit.source(*names).rstrip("\n")]
    return lines


def tolerance_lines(finding: Finding, *, bitwise: bool = False) -> list[str]:
    """``ATOL, RTOL``: the finding's table tolerance (the judge may have allowed more: said in a comment)."""
    if bitwise:
        return ["ATOL, RTOL = 0.0, 0.0  # unused: the results are compared bit for bit"]
    m = finding.mismatch
    atol, rtol = (m.atol, m.rtol) if m else (0.0, 0.0)
    lines = [f"ATOL, RTOL = {atol!r}, {rtol!r}  # elementwise: |actual - expected| <= ATOL + RTOL * |expected|; integers exact"]
    if m is not None and m.allowed is not None and math.isfinite(m.allowed):
        lines.append(f"# (torchsleuth allowed {m.allowed:.6g} at the worst element, its measured sensitivity included)")
    return lines


def tensors_function(call: CallSpec) -> list[str]:
    """``tensors()``: every argument rebuilt exactly (from ``DATA``, or seeded when too large to inline)."""
    lines = ["", "", "def tensors():", '    """Every tensor argument, exactly as the kernel saw it before the call."""', "    return {"]
    for seed, spec in enumerate(call.tensors):
        data = f"DATA[{spec.path!r}]" if spec.data is not None else f"seed={seed}"
        grad = ", requires_grad=True" if spec.requires_grad else ""
        note = f"  # {spec.layout}" if spec.data is not None else f"  # {spec.layout}; storage too large to inline: seeded values stand in"
        if spec.tiled:
            data += f", tiled={tuple(spec.tiled)!r}"
            note = f"  # {spec.layout}; too large to inline: its first {spec.tiled[1]} entries along dim {spec.tiled[0]}, tiled"
        lines.append(
            f"        {spec.path!r}: rebuild({spec.dtype!r}, {spec.device!r}, {spec.storage_numel}, {tuple(spec.shape)!r}, "
            f"{tuple(spec.stride)!r}, {spec.storage_offset}, {data}{grad}),{note}"
        )
    lines.append("    }")
    return lines


def data_block(call: CallSpec) -> list[str]:
    """``DATA``: each inline storage's bytes, zlib-compressed and base85-encoded."""
    inline = [s for s in call.tensors if s.data is not None]
    if not inline:
        return []
    lines = ["", "", "# Each storage's bytes, zlib-compressed and base85-encoded.", "DATA = {"]
    for spec in inline:
        text = base64.b85encode(spec.data).decode("ascii")
        chunks = [text[i:i + LINE] for i in range(0, len(text), LINE)] or [""]
        lines.append(f"    {spec.path!r}: (")
        lines += [f'        "{chunk}"' for chunk in chunks]
        lines.append("    ),")
    lines.append("}")
    return lines


def footer() -> list[str]:
    """Runs ``main``; a call that raises now exits 2 (loud, so not the silent bug checked)."""
    return [
        "", "",
        'if __name__ == "__main__":',
        "    try:",
        "        status = main()",
        "    except Exception:  # the call now raises: loud, so not the silent bug checked here",
        "        traceback.print_exc()",
        '        print("CANNOT CHECK: the call raised")',
        "        status = 2",
        "    sys.exit(status)",
        "",
    ]


# --- the call and its references, as source ----------------------------------------------


def call_source(call: CallSpec) -> str:
    inner = ", ".join(s for s in (call.args_src, call.kwargs_src) if s)
    return f"{call.function}({inner})"


def _resolve(name: str):
    parts = name.split(".")
    if not parts or parts[0] != "torch":
        return None
    obj = torch
    for part in parts[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


class _Retarget(ast.NodeTransformer):
    """Device arguments to the CPU and, if ``wide``, the case's dtype to float64 (complex128)."""

    def __init__(self, dtype: str, wide: bool):
        self.dtype, self.wide = dtype, wide

    def visit_keyword(self, node: ast.keyword) -> ast.keyword:
        self.generic_visit(node)
        if node.arg == "device" and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            node.value = ast.Constant("cpu")
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if ast.unparse(node.func) == "torch.device":
            return ast.parse("torch.device('cpu')", mode="eval").body
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if self.wide and ast.unparse(node) == f"torch.{self.dtype}":
            wide = "complex128" if "complex" in self.dtype else "float64"
            return ast.parse(f"torch.{wide}", mode="eval").body
        return self.generic_visit(node)


def reference_source(finding: Finding, call: CallSpec) -> tuple[str, str]:
    """Source of the reference call and a comment saying what it is."""
    tree = ast.parse(call_source(call), mode="eval").body
    assert isinstance(tree, ast.Call)
    what = "the same call"
    if call.variant == "inplace":
        name = call.function
        if name.endswith("_") and not name.endswith("__") and _resolve(name[:-1]) is not None:
            tree.func = ast.parse(name[:-1], mode="eval").body
            what = f"the functional {name[:-1]}"
        else:
            what = "the in-place call itself (no functional counterpart by name)"
    if call.variant == "out":
        tree.keywords = [k for k in tree.keywords if k.arg != "out"]
        what = "the same call without out="
        if call.function.startswith("torch.ops.aten.") and finding.opinfo.startswith("aten."):  # an out= overload called directly
            tree.func = ast.parse(f"torch.ops.{finding.opinfo}", mode="eval").body
            what = f"its functional overload {finding.opinfo}"
    if finding.reference in ("precision", "device"):
        tree = _Retarget(finding.dtype, wide=finding.reference == "precision").visit(tree)
    where = {
        "layout": "on contiguous copies, same device and dtype",
        "precision": "on the CPU on float64 (complex128) copies, rounded back to the actual dtype",
        "device": "on the CPU on contiguous copies, same dtype",
    }.get(finding.reference, "")
    return ast.unparse(tree), f"{what}, {where}" if where else what


def function_lines(call: CallSpec, reference: tuple[str, str] | None = None) -> list[str]:
    """``call(T)``, and ``reference(T)`` when given (``reference_source``'s pair)."""
    lines = ["", "", "def call(T):", '    """The call under test, as torchsleuth made it."""', f"    return {call_source(call)}"]
    if reference is not None:
        source, what = reference
        lines += ["", "", "def reference(T):", f'    """The expected value: {what}."""', f"    return {source}"]
    return lines


def written(call: CallSpec) -> tuple[str, ...]:
    """The paths the variant writes by contract, in argument order."""
    if call.variant == "inplace":
        return tuple(s.path for s in call.tensors if s.path == "input" or s.path.startswith("input["))
    if call.variant == "out":
        return tuple(s.path for s in call.tensors if s.path == "out" or s.path.startswith("out["))
    return ()


def constants(call: CallSpec) -> list[str]:
    """``WRITTEN`` and ``GRAD_PATHS``, where the variant has them."""
    lines = []
    if written(call):
        lines.append(f"WRITTEN = {written(call)!r}  # the tensors the call writes by contract")
    if call.variant == "backward":
        lines.append(f"GRAD_PATHS = {tuple(call.grad_paths)!r}  # the inputs differentiated")
    return lines


def actual_lines(call: CallSpec) -> list[str]:
    """Source making ``actual`` from a seeded call on ``T``: what the variant produced."""
    if call.variant == "backward":
        return ["    torch.manual_seed(CALL_SEED)", "    actual = leaves(gradients(call, T))"]
    if call.variant in ("inplace", "out"):
        return ["    torch.manual_seed(CALL_SEED)", "    call(T)", "    actual = [(path, T[path]) for path in WRITTEN]"]
    return ["    torch.manual_seed(CALL_SEED)", "    actual = leaves(call(T))"]


def importing(lines: list[str], modules: tuple[str, ...]) -> list[str]:
    """``lines`` (a script with a ``main``) that first imports ``modules`` (the run's ``--import``s, the module a
    ``torchsleuth.check`` op is defined in), as the run did: the op may exist only once they ran."""
    if not modules or "def main():" not in lines:
        return lines
    at = lines.index("def main():")
    loader = ["", "", *(f"import {name}" for name in kit.imports("load_imports")),
              f"IMPORTS = {tuple(modules)!r}  # what the run imported first (custom ops, kernels); edit if they moved",
              "", "", kit.source("load_imports").rstrip("\n")]
    return [*lines[:at - 2], *loader, *lines[at - 2:at + 1], "    load_imports()", *lines[at + 1:]]


def start_main(call: CallSpec, what: str) -> list[str]:
    """The head of ``main``: the tensors made, what is checked and the call printed."""
    return [
        "", "", "def main():",
        "    T = tensors()",
        f"    print({('torchsleuth repro: ' + what)!r})",
        f"    print({('call: ' + call_source(call))!r})",
        "    describe(T)",
    ]


def verdict(condition: str, fixed: str) -> list[str]:
    """The end of ``main``: 1 with ``BUG PRESENT`` while ``condition`` holds, else 0 with ``OK: fixed``."""
    return [
        f"    if {condition}:",
        '        print("BUG PRESENT:", SUMMARY)',
        "        return 1",
        f"    print({('OK: ' + fixed)!r})",
        "    return 0",
    ]
