"""Repro scripts: one standalone Python file per finding, needing only torch.

Design note. A script is what one pastes into a bug report, so it is written
for a reader: a header that says what was found and how to run it, a few
small helper functions, the call written out literally from the finding's
``CallSpec``, the reference it was judged against, one ``main`` that checks
the same property the oracle checked, and the tensors' bytes at the bottom.

Tensors are rebuilt exactly: the whole storage (gaps and guard values
included) from the inline bytes, then viewed with the recorded shape, stride
and storage offset. A storage too large to carry inline is filled from a
seed instead, and the script says so where the tensor is made.

What ``main`` checks follows the finding, not the variant alone:

* ``layout``, ``precision``, ``device``: the call against the same call on
  contiguous copies (the functional counterpart for in-place and ``out=``
  calls), on the CPU in float64 (rounded back to the actual dtype), or on the
  CPU in the same dtype. Elementwise ``|a - e| <= atol + rtol * |e|`` with the
  finding's atol and rtol, NaN matching NaN; integers and bools exactly. A
  finding about metadata (shape, dtype, structure) checks only metadata, so a
  random or uninitialized op is not judged by values it may legitimately vary.
* ``determinism``: the call twice on fresh tensors, bit for bit.
* ``contract``: the storage before and after the call (writes outside the
  view, an input changed), strides and identity of a written tensor, or the
  two prefilled runs of a random in-place op (elements never drawn), or the
  support of the distribution (values it cannot produce).
* ``isolation`` (crash, hang): the call in a child process of the script.

The tolerance is the table's atol and rtol only: the judge may have widened
it by the op's measured sensitivity, so a script can be stricter than the
sweep was. The header gives what was allowed at the worst element.

Exit status: 1 while the bug is present, 0 once it is gone, 2 when the
check cannot be made (no call was recorded, or the call now raises).
"""

from __future__ import annotations

import ast
import base64
import math
from pathlib import Path
from typing import Iterable

import torch

from .. import deep
from .._version import __version__
from ..judge.records import Finding
from ..run.records import CallSpec

# Must equal run.call.CALL_SEED: the engine seeds every call with it, so a
# random op draws the same numbers here.
CALL_SEED = 20260405
# The values a random in-place op's self is filled with before its two runs
# (engine._PREFILL): an element keeping its fill in both was never drawn.
_PREFILL = {"inexact": ("float('nan')", "1234.5"), "integer": ("7", "11"), "bool": ("False", "True")}
# Mismatch attributes that are about metadata: only metadata is rechecked.
_METADATA = frozenset({"shape", "dtype", "structure", "type", "layout"})
# Seconds a child may run before the isolation check calls it a hang.
_HANG_SECONDS = 60.0
_LINE = 76  # width of the inline data lines


def script(finding: Finding, *, torch_version: str | None = None) -> str:
    """A standalone script that rebuilds ``finding``'s call and exits 1 while it is wrong."""
    torch_version = torch_version or torch.__version__
    own = deep.repro(finding, torch_version)  # a deeper oracle's finding checks its own property
    if own is not None:
        return own
    call = finding.call
    why = _why_not(finding)
    if why:
        return _no_repro(finding, torch_version, why)
    assert call is not None
    check = _CHECKS[_check_of(finding)]
    return "\n".join(check(finding, call, torch_version))


def write_scripts(findings: Iterable[Finding], directory: str | Path, *, torch_version: str | None = None) -> dict[str, Path]:
    """Each finding's script as ``directory/repros/<id>.py``; finding id -> path."""
    folder = Path(directory) / "repros"
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for finding in findings:
        if finding.id in written:
            continue
        path = folder / f"{finding.id}.py"
        path.write_text(script(finding, torch_version=torch_version), encoding="utf-8")
        written[finding.id] = path
    return written


# --- which check ------------------------------------------------------------------------


def _check_of(finding: Finding) -> str:
    attribute = finding.mismatch.attribute if finding.mismatch else ""
    if finding.reference in ("layout", "precision", "device"):
        return "metadata" if attribute in _METADATA else "values"
    if finding.reference == "determinism":
        return "determinism"
    if finding.reference == "isolation":
        return "isolation"
    if attribute == "stride":
        return "strides"
    if attribute == "identity":
        return "identity"
    if finding.kind in ("out_of_view_write", "input_mutated"):
        return finding.kind
    if finding.kind == "random_coverage":
        return "coverage" if finding.mismatch else "support"
    return ""


def _why_not(finding: Finding) -> str:
    call = finding.call
    if finding.kind == "invariant":
        return ("an invariant of a training step (a parameter or the optimizer's state) is no single call; "
                "the op findings of the same watch, if any, name the call and have repro scripts")
    if call is None:
        return (
            "the call was not recorded (a crash or hang is seen from outside the worker, before its "
            f"tensors are described); rerun the case {finding.case_id!r} to get one"
        )
    if call.why_not:
        return call.why_not
    if not call.function:
        return "the op has no public name to call it by"
    if not _check_of(finding):
        return f"a {finding.kind} finding judged against the {finding.reference} reference has no automated check yet"
    if _check_of(finding) == "support" and _method(finding) not in _SUPPORT:
        return f"no support check is known for {finding.op}"
    return ""


# --- the parts every script shares ----------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _header(finding: Finding, call: CallSpec | None, torch_version: str) -> list[str]:
    m = finding.mismatch
    lines = [
        f"# torchsleuth repro for finding {finding.id}",
        "#",
        f"#   op         {finding.op} (OpInfo {finding.opinfo!r}), {finding.variant} variant, {finding.dtype} on {finding.device}",
        f"#   kind       {finding.kind}, judged against the {finding.reference} reference",
        f"#   finding    {_one_line(finding.summary)}",
    ]
    if m is not None:
        lines.append(f"#   mismatch   {_one_line(m.describe())}")
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


def _no_repro(finding: Finding, torch_version: str, why: str) -> str:
    lines = _header(finding, finding.call, torch_version)
    lines += [
        f"# No repro could be generated: {_one_line(why)}.",
        "",
        "import sys",
        "",
        f"print({('torchsleuth finding ' + finding.id + ': ' + _one_line(finding.summary))!r})",
        f"print({('no repro could be generated: ' + _one_line(why))!r}, file=sys.stderr)",
        "sys.exit(2)",
        "",
    ]
    return "\n".join(lines)


_IMPORTS = """\
import base64
{more}import sys
import traceback
import zlib

import torch

CALL_SEED = {seed}  # torchsleuth seeds every call with this
SUMMARY = {summary}
"""

_REBUILD = '''
def rebuild(dtype, device, numel, shape, stride, offset, data=None, seed=0, requires_grad=False):
    """One argument exactly as the kernel saw it: the whole storage (gaps and
    guard values included), viewed with the recorded shape, stride and offset."""
    dtype = getattr(torch, dtype)
    if data is not None:
        raw = bytearray(zlib.decompress(base64.b85decode(data)))
        flat = torch.frombuffer(raw, dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
    else:
        flat = seeded(dtype, numel, seed)
    view = flat.to(device).as_strided(shape, stride, offset).detach()
    return view.requires_grad_(requires_grad)
'''

_SEEDED = '''
def seeded(dtype, numel, seed):
    """Stand-in values for a storage too large to carry inline."""
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(numel, generator=generator, dtype=torch.float64).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=generator).bool()
    return torch.randint(0, 10, (numel,), generator=generator).to(dtype)
'''

_LEAVES = '''
def leaves(value, path="out"):
    """The tensors and numbers of a result, with paths as torchsleuth names them."""
    if isinstance(value, dict):
        return [(str(key), item) for key, item in value.items()]
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return [leaf for i, item in enumerate(value) for leaf in leaves(item, f"{path}[{i}]")]
    return [(path, value)]
'''

_COPIES = '''
def copies(T, device=None, wide=False):
    """Contiguous copies in fresh storages (on ``device``; floats in float64 if ``wide``)."""
    found = {}
    for path, t in T.items():
        c = t.detach() if device is None else t.detach().to(device)
        if wide and (c.dtype.is_floating_point or c.dtype.is_complex):
            c = c.to(torch.complex128 if c.dtype.is_complex else torch.float64)
        found[path] = c.clone(memory_format=torch.contiguous_format).requires_grad_(t.requires_grad)
    return found
'''

_GRADIENTS = '''
def gradients(function, T):
    """The input gradients of ``function`` given the recorded output gradients."""
    outputs = [t for _, t in leaves(function(T)) if isinstance(t, torch.Tensor) and (t.dtype.is_floating_point or t.dtype.is_complex)]
    pairs = [(t, T[f"grad_output[{i}]"]) for i, t in enumerate(outputs) if t.requires_grad]
    if not pairs:
        return {}
    inputs = [T[path] for path in GRAD_PATHS]
    grads = torch.autograd.grad([t for t, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True)
    return {f"grad[{path}]": g for path, g in zip(GRAD_PATHS, grads)}
'''

_COMPARE = '''
def compare(actual, expected, *, values=True, bitwise=False, cast=False):
    """Pairs the leaves up in order and prints each pair that differs; True if all agree."""
    if len(actual) != len(expected):
        print(f"structure: expected {[p for p, _ in expected]}, got {[p for p, _ in actual]}")
        return False
    results = [agree(path, a, e, values=values, bitwise=bitwise, cast=cast) for (path, a), (_, e) in zip(actual, expected)]
    return all(results)


def agree(path, a, e, *, values, bitwise, cast):
    if not isinstance(a, torch.Tensor) or not isinstance(e, torch.Tensor):
        if isinstance(a, (int, float, complex)) and isinstance(e, (int, float, complex)) and not isinstance(e, bool):
            a, e = torch.tensor(a), torch.tensor(e)
        else:
            if a != e:
                print(f"{path}: expected {e!r}, got {a!r}")
            return a == e
    if a.shape != e.shape:
        print(f"{path}: expected shape {list(e.shape)}, got {list(a.shape)}")
        return False
    e = e.to(a.dtype) if cast else e
    if a.dtype != e.dtype:
        print(f"{path}: expected dtype {e.dtype}, got {a.dtype}")
        return False
    if not values:
        print(f"{path}: shape {list(a.shape)} and dtype {a.dtype} as expected")
        return True
    a = a.detach().resolve_conj().resolve_neg().cpu()
    e = e.detach().resolve_conj().resolve_neg().cpu()
    inexact = a.dtype.is_floating_point or a.dtype.is_complex
    work = torch.complex128 if a.dtype.is_complex else torch.float64
    diff = (a.to(work) - e.to(work)).abs()
    if bitwise:
        allowed = torch.zeros_like(diff)
        bad = ~same_bits(a, e)
    elif inexact:
        allowed = ATOL + RTOL * e.to(work).abs()
        nan_both = torch.isnan(a) & torch.isnan(e)
        # an infinity only matches itself (its allowance would be infinite); a NaN diff is bad
        close = torch.isfinite(e.to(work)) & (diff <= allowed)
        bad = ~((a.to(work) == e.to(work)) | nan_both | close)
    else:
        allowed = torch.zeros_like(diff)
        bad = a != e
    print(f"{path}: actual stride {list(a.stride())}, expected stride {list(e.stride())}")
    show(path, a, e, diff, allowed, bad)
    return not bool(bad.any())


def same_bits(a, b):
    """Elementwise: the same bytes (so NaN payloads and signed zeros count)."""
    a = a.detach().cpu().contiguous().reshape(-1)
    b = b.detach().cpu().to(a.dtype).contiguous().reshape(-1)
    if a.dtype == torch.bool or a.numel() == 0:
        return (a == b).reshape(a.shape)
    size = a.element_size()
    return (a.view(torch.uint8).reshape(-1, size) == b.view(torch.uint8).reshape(-1, size)).all(-1)


def show(path, a, e, diff, allowed, bad):
    """The mismatch count, the largest difference, and a few elements around the worst one."""
    n = a.numel()
    print(f"{path}: {int(bad.sum())} of {n} element(s) differ (dtype {a.dtype}, shape {list(a.shape)})")
    if not bool(bad.any()):
        return
    diff = torch.nan_to_num(diff.reshape(-1), nan=float("inf"))
    excess = torch.where(bad.reshape(-1), diff - allowed.reshape(-1), torch.tensor(-float("inf"), dtype=diff.dtype))
    worst = int(excess.argmax())
    print(f"  max |actual - expected| = {float(diff.max()):.6g}; at the worst element, "
          f"{float(diff[worst]):.6g} against {float(allowed.reshape(-1)[worst]):.6g} allowed (ATOL + RTOL * |expected|)")
    print(f"  {'index':<18}{'actual':>16}{'expected':>16}{'|diff|':>14}")
    for i in range(max(0, worst - 2), min(n, worst + 3)):
        index = [int(j) for j in torch.unravel_index(torch.tensor(i), a.shape)] if a.dim() else []
        mark = "  <- worst" if i == worst else ("  <- differs" if bool(bad.reshape(-1)[i]) else "")
        print(f"  {str(index):<18}{fmt(a.reshape(-1)[i]):>16}{fmt(e.reshape(-1)[i]):>16}{float(diff[i]):>14.4g}{mark}")


def fmt(x):
    value = x.item()
    if isinstance(value, complex):
        return f"{value.real:.6g}{value.imag:+.6g}j"
    return f"{value:.7g}" if isinstance(value, float) else str(value)
'''

_DESCRIBE = '''
def describe(T):
    for path, t in T.items():
        print(f"  {path}: shape {list(t.shape)}, stride {list(t.stride())}, offset {t.storage_offset()}, "
              f"{t.dtype} on {t.device}{', requires_grad' if t.requires_grad else ''}")
'''

_STORAGE = '''
def storage_bytes(t):
    """The bytes of every element of ``t``'s whole storage, one row an element."""
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))
    return flat.detach().cpu().clone().view(torch.uint8).reshape(n, t.element_size())


def view_mask(numel, shape, stride, offset):
    """Which storage elements the view covers."""
    mask = torch.zeros(numel, dtype=torch.bool)
    if all(s > 0 for s in shape):
        mask[torch.arange(numel).as_strided(shape, stride, offset).reshape(-1)] = True
    return mask
'''


# For scripts of sweeps that imported the user's modules first (IMPORTS; importlib and runpy imported).
_LOAD_IMPORTS = '''
def load_imports():
    """The modules the sweep imported first (custom kernels): a .py file or a module name."""
    for name in IMPORTS:
        if name.endswith(".py"):
            GLOBALS.append(runpy.run_path(name, run_name="__torchsleuth_import__"))
        else:
            importlib.import_module(name)


GLOBALS = []  # keeps an imported file's torch.library objects alive
'''


def _helpers(*names: str) -> list[str]:
    blocks = {
        "rebuild": _REBUILD, "seeded": _SEEDED, "leaves": _LEAVES, "copies": _COPIES, "gradients": _GRADIENTS,
        "compare": _COMPARE, "describe": _DESCRIBE, "storage": _STORAGE, "load_imports": _LOAD_IMPORTS,
    }
    return [blocks[name] for name in names]


def _preamble(finding: Finding, call: CallSpec, torch_version: str, helpers: tuple[str, ...], constants: list[str], imports: tuple[str, ...] = ()) -> list[str]:
    lines = _header(finding, call, torch_version)
    more = "".join(f"import {name}\n" for name in imports)
    lines.append(_IMPORTS.format(more=more, seed=CALL_SEED, summary=repr(_one_line(finding.summary))).rstrip("\n"))
    lines += constants
    needed = ["rebuild"] + (["seeded"] if any(s.data is None for s in call.tensors) else []) + ["describe", *helpers]
    for block in _helpers(*dict.fromkeys(needed)):
        lines += ["", "", block.strip("\n")]
    return lines


def _tolerance_lines(finding: Finding, *, bitwise: bool = False) -> list[str]:
    if bitwise:
        return ["ATOL, RTOL = 0.0, 0.0  # unused: the results are compared bit for bit"]
    m = finding.mismatch
    atol, rtol = (m.atol, m.rtol) if m else (0.0, 0.0)
    lines = [f"ATOL, RTOL = {atol!r}, {rtol!r}  # elementwise: |actual - expected| <= ATOL + RTOL * |expected|; integers exact"]
    if m is not None and m.allowed is not None and math.isfinite(m.allowed):
        lines.append(f"# (torchsleuth allowed {m.allowed:.6g} at the worst element, its measured sensitivity included)")
    return lines


def _tensors_function(call: CallSpec) -> list[str]:
    lines = ["", "", "def tensors():", '    """Every tensor argument, exactly as the kernel saw it before the call."""', "    return {"]
    for seed, spec in enumerate(call.tensors):
        data = f"DATA[{spec.path!r}]" if spec.data is not None else f"seed={seed}"
        grad = ", requires_grad=True" if spec.requires_grad else ""
        note = f"  # {spec.layout}" if spec.data is not None else f"  # {spec.layout}; storage too large to inline: seeded values stand in"
        lines.append(
            f"        {spec.path!r}: rebuild({spec.dtype!r}, {spec.device!r}, {spec.storage_numel}, {tuple(spec.shape)!r}, "
            f"{tuple(spec.stride)!r}, {spec.storage_offset}, {data}{grad}),{note}"
        )
    lines.append("    }")
    return lines


def _data_block(call: CallSpec) -> list[str]:
    inline = [s for s in call.tensors if s.data is not None]
    if not inline:
        return []
    lines = ["", "", "# Each storage's bytes, zlib-compressed and base85-encoded.", "DATA = {"]
    for spec in inline:
        text = base64.b85encode(spec.data).decode("ascii")
        chunks = [text[i:i + _LINE] for i in range(0, len(text), _LINE)] or [""]
        lines.append(f"    {spec.path!r}: (")
        lines += [f'        "{chunk}"' for chunk in chunks]
        lines.append("    ),")
    lines.append("}")
    return lines


def _footer() -> list[str]:
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


def _call_source(call: CallSpec) -> str:
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


def _reference_source(finding: Finding, call: CallSpec) -> tuple[str, str]:
    """Source of the reference call and a comment saying what it is."""
    tree = ast.parse(_call_source(call), mode="eval").body
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
    if finding.reference in ("precision", "device"):
        tree = _Retarget(finding.dtype, wide=finding.reference == "precision").visit(tree)
    where = {
        "layout": "on contiguous copies, same device and dtype",
        "precision": "on the CPU on float64 (complex128) copies, rounded back to the actual dtype",
        "device": "on the CPU on contiguous copies, same dtype",
    }.get(finding.reference, "")
    return ast.unparse(tree), f"{what}, {where}" if where else what


def _function_lines(call: CallSpec, reference: tuple[str, str] | None = None) -> list[str]:
    lines = ["", "", "def call(T):", '    """The call under test, as torchsleuth made it."""', f"    return {_call_source(call)}"]
    if reference is not None:
        source, what = reference
        lines += ["", "", "def reference(T):", f'    """The expected value: {what}."""', f"    return {source}"]
    return lines


def _written(call: CallSpec) -> tuple[str, ...]:
    """The paths the variant writes by contract, in argument order."""
    if call.variant == "inplace":
        return tuple(s.path for s in call.tensors if s.path == "input" or s.path.startswith("input["))
    if call.variant == "out":
        return tuple(s.path for s in call.tensors if s.path == "out" or s.path.startswith("out["))
    return ()


def _actual_lines(call: CallSpec) -> list[str]:
    """Source making ``actual`` from a seeded call on ``T``: what the variant produced."""
    if call.variant == "backward":
        return ["    torch.manual_seed(CALL_SEED)", "    actual = leaves(gradients(call, T))"]
    if call.variant in ("inplace", "out"):
        return ["    torch.manual_seed(CALL_SEED)", "    call(T)", "    actual = [(path, T[path]) for path in WRITTEN]"]
    return ["    torch.manual_seed(CALL_SEED)", "    actual = leaves(call(T))"]


def _start_main(call: CallSpec, what: str) -> list[str]:
    return [
        "", "", "def main():",
        "    T = tensors()",
        f"    print({('torchsleuth repro: ' + what)!r})",
        f"    print({('call: ' + _call_source(call))!r})",
        "    describe(T)",
    ]


def _verdict(condition: str, fixed: str) -> list[str]:
    return [
        f"    if {condition}:",
        '        print("BUG PRESENT:", SUMMARY)',
        "        return 1",
        f"    print({('OK: ' + fixed)!r})",
        "    return 0",
    ]


def _constants(call: CallSpec) -> list[str]:
    lines = []
    if _written(call):
        lines.append(f"WRITTEN = {_written(call)!r}  # the tensors the call writes by contract")
    if call.variant == "backward":
        lines.append(f"GRAD_PATHS = {tuple(call.grad_paths)!r}  # the inputs differentiated")
    return lines


# --- the checks ---------------------------------------------------------------------------------


def _values(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    metadata = _check_of(finding) == "metadata"
    helpers = ("leaves", "copies", "compare") + (("gradients",) if call.variant == "backward" else ())
    lines = _preamble(finding, call, torch_version, helpers, _tolerance_lines(finding) + _constants(call))
    lines += _function_lines(call, _reference_source(finding, call))
    lines += _tensors_function(call)
    copies = {"layout": "copies(tensors())", "device": "copies(tensors(), device='cpu')", "precision": "copies(tensors(), device='cpu', wide=True)"}[finding.reference]
    lines += _start_main(call, f"{finding.variant} call against {finding.reference} reference ({'metadata' if metadata else 'values'})")
    lines += _actual_lines(call)
    lines.append(f"    R = {copies}")
    if call.variant == "backward":
        lines += ["    torch.manual_seed(CALL_SEED)", "    expected = leaves(gradients(reference, R))"]
    else:
        lines += ["    torch.manual_seed(CALL_SEED)", "    expected = leaves(reference(R))"]
    if finding.reference == "precision":
        lines.append("    expected = [(p, e.to(a.dtype) if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor) else e) for (p, e), (_, a) in zip(expected, actual)]")
    cast = call.variant == "inplace"  # self keeps its dtype whatever the functional result's is
    values = "False" if metadata else "True"
    if finding.kind == "dropped_write":
        lines += [
            "    before = tensors()",
            "    for path, t in actual:",
            "        kept = same_bits(t, before[path])",
            '        print(f"{path}: {int(kept.sum())} of {t.numel()} element(s) kept their value from before the call")',
        ]
    lines.append(f"    agreed = compare(actual, expected, values={values}, cast={cast})")
    lines += _verdict("not agreed", "the call agrees with its reference")
    return lines + _data_block(call) + _footer()


def _determinism(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    helpers = ("leaves", "compare") + (("gradients",) if call.variant == "backward" else ())
    lines = _preamble(finding, call, torch_version, helpers, _tolerance_lines(finding, bitwise=True) + _constants(call))
    lines += _function_lines(call)
    lines += _tensors_function(call)
    lines += [
        "", "",
        "def once():",
        '    """The call on fresh tensors, seeded: what it produced, copied."""',
        "    T = tensors()",
    ]
    lines += _actual_lines(call)
    lines.append("    return [(p, v.detach().clone() if isinstance(v, torch.Tensor) else v) for p, v in actual]")
    lines += _start_main(call, "the same call twice, bit for bit")
    lines += ["    first, second = once(), once()", "    agreed = compare(second, first, bitwise=True)"]
    lines += _verdict("not agreed", "the same call gives the same bits twice")
    return lines + _data_block(call) + _footer()


def _storage_check(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    """out_of_view_write and input_mutated: the storage before and after the call."""
    outside = finding.kind == "out_of_view_write"
    path = finding.mismatch.path if finding.mismatch else ""
    specs = [s for s in call.tensors if s.path == path] or list(call.tensors)
    views = ", ".join(f"{s.path!r}: ({s.storage_numel}, {tuple(s.shape)!r}, {tuple(s.stride)!r}, {s.storage_offset})" for s in specs)
    lines = _preamble(finding, call, torch_version, ("storage",), [f"VIEWS = {{{views}}}  # path: (storage elements, shape, stride, offset) before the call"])
    lines += _function_lines(call)
    lines += _tensors_function(call)
    what = "elements outside each view must keep their bytes" if outside else "an input the call only reads must keep its values"
    lines += _start_main(call, what)
    lines += [
        "    before = {path: storage_bytes(T[path]) for path in VIEWS}",
        "    torch.manual_seed(CALL_SEED)",
        "    call(T)",
        "    found = 0",
        "    for path, (numel, shape, stride, offset) in VIEWS.items():",
        "        after = storage_bytes(T[path])",
        "        if after.shape != before[path].shape:",
        '            print(f"{path}: the storage was replaced ({before[path].shape[0]} -> {after.shape[0]} elements)")',
        "            continue",
        "        changed = (after != before[path]).any(-1)",
        f"        bad = changed & {'~' if outside else ''}view_mask(numel, shape, stride, offset)",
        "        found += int(bad.sum())",
        "        where = [int(i) for i in bad.nonzero().reshape(-1)[:8]]",
        f'        print(f"{{path}}: {{int(bad.sum())}} storage element(s) {"outside" if outside else "inside"} the view changed, at storage indices {{where}}")',
    ]
    lines += _verdict("found", "no element changed that should not have")
    return lines + _data_block(call) + _footer()


def _strides(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    lines = _preamble(finding, call, torch_version, (), _constants(call))
    lines += _function_lines(call)
    lines += _tensors_function(call)
    lines += _start_main(call, "a written tensor must keep its shape, strides and offset")
    lines += [
        "    before = {path: (tuple(T[path].shape), T[path].stride(), T[path].storage_offset()) for path in WRITTEN}",
        "    torch.manual_seed(CALL_SEED)",
        "    call(T)",
        "    moved = 0",
        "    for path in WRITTEN:",
        "        after = (tuple(T[path].shape), T[path].stride(), T[path].storage_offset())",
        '        print(f"{path}: (shape, stride, offset) {before[path]} before the call, {after} after")',
        "        moved += after != before[path]",
    ]
    lines += _verdict("moved", "every written tensor kept its layout")
    return lines + _data_block(call) + _footer()


def _identity(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    lines = _preamble(finding, call, torch_version, ("leaves",), _constants(call))
    lines += _function_lines(call)
    lines += _tensors_function(call)
    lines += _start_main(call, "the call must return the tensors it wrote")
    lines += [
        "    torch.manual_seed(CALL_SEED)",
        "    returned = [v for _, v in leaves(call(T)) if isinstance(v, torch.Tensor)]",
        "    wrong = 0",
        "    for path, r in zip(WRITTEN, returned):",
        "        same = r.untyped_storage().data_ptr() == T[path].untyped_storage().data_ptr()",
        '        print(f"{path}: returned {\'the same tensor\' if same else \'a different tensor\'}")',
        "        wrong += not same",
    ]
    lines += _verdict("wrong", "the call returns the tensors it wrote")
    return lines + _data_block(call) + _footer()


def _coverage(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    dtype = getattr(torch, finding.dtype)
    family = "bool" if dtype == torch.bool else "inexact" if (dtype.is_floating_point or dtype.is_complex) else "integer"
    first, second = _PREFILL[family]
    constants = _constants(call) + [f"FILLS = ({first}, {second})  # self is filled with each before one of two seeded runs"]
    lines = _preamble(finding, call, torch_version, ("compare",), constants)
    lines += _function_lines(call)
    lines += _tensors_function(call)
    lines += _start_main(call, "a random in-place op must draw every element of self")
    lines += [
        "    runs = []",
        "    for fill in FILLS:",
        "        T = tensors()",
        "        with torch.no_grad():",
        "            for path in WRITTEN:",
        "                T[path].fill_(fill)",
        "        torch.manual_seed(CALL_SEED)",
        "        call(T)",
        "        runs.append({path: T[path].detach().cpu().clone() for path in WRITTEN})",
        "    kept = 0",
        "    for path in WRITTEN:",
        "        first, second = runs[0][path], runs[1][path]",
        "        unwritten = same_bits(first, torch.full_like(first, FILLS[0])) & same_bits(second, torch.full_like(second, FILLS[1]))",
        "        unwritten = unwritten.reshape(first.shape)",
        "        where = [[int(i) for i in index] for index in unwritten.nonzero()[:8]]",
        '        print(f"{path}: {int(unwritten.sum())} of {first.numel()} element(s) kept their fill in both runs, at {where}")',
        "        kept += int(unwritten.sum())",
    ]
    lines += _verdict("kept", "every element of self was drawn")
    return lines + _data_block(call) + _footer()


# Support of each random in-place method: parameter names, defaults, and the
# condition (over ``v``, the values as float64) that no draw may meet.
_SUPPORT: dict[str, tuple[tuple[str, ...], tuple, str]] = {
    "uniform_": (("from", "to"), (0.0, 1.0), "(v < {from}) | (v > {to})"),
    "normal_": (("mean", "std"), (0.0, 1.0), "torch.isinf(v)"),
    "exponential_": (("lambd",), (1.0,), "v < 0"),
    "geometric_": (("p",), (None,), "(v < 1) | (v != torch.floor(v))"),
    "log_normal_": (("mean", "std"), (1.0, 2.0), "v < 0"),
    "cauchy_": (("median", "sigma"), (0.0, 1.0), "torch.zeros_like(v, dtype=torch.bool)"),
    "bernoulli_": (("p",), (0.5,), "(v != 0) & (v != 1)"),
    "random_": (("from", "to"), (None, None), "v != torch.floor(v)"),
}


def _method(finding: Finding) -> str:
    parts = finding.op.split(".")
    return parts[1] if len(parts) >= 3 and parts[0] == "aten" else finding.op


def _literal_parameters(call: CallSpec, method: str) -> dict:
    """The method's parameters read from the call source (literals only; self skipped)."""
    names, defaults, _ = _SUPPORT[method]
    tree = ast.parse(_call_source(call), mode="eval").body
    assert isinstance(tree, ast.Call)
    positional = [_literal(node) for node in tree.args[1:]]
    if method == "random_" and len(positional) == 1:
        positional = [0, positional[0]]  # random_(to)
    values = dict(zip(names, defaults))
    values.update(zip(names, positional))
    values.update({k.arg: _literal(k.value) for k in tree.keywords if k.arg in names})
    return values


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None  # a tensor argument: no bound can be read from it


def _support(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    method = _method(finding)
    p = _literal_parameters(call, method)
    bad = _SUPPORT[method][2].format(**{k: repr(float(v)) if v is not None else "None" for k, v in p.items()})
    if method == "random_":
        bad += "".join(f" | (v {op} {float(p[k])!r})" for k, op in (("from", "<"), ("to", ">=")) if p[k] is not None)
    constants = [f"WRITTEN = {_written(call) or ('input',)!r}  # the tensors the call draws into", f"# {method} with {p}: no draw may satisfy  {bad}"]
    lines = _preamble(finding, call, torch_version, (), constants)
    lines += _function_lines(call)
    lines += _tensors_function(call)
    lines += _start_main(call, f"{method} must draw values its distribution can produce")
    lines += [
        "    torch.manual_seed(CALL_SEED)",
        "    call(T)",
        "    impossible = 0",
        "    for path in WRITTEN:",
        "        values = T[path].detach().cpu()",
        "        v = values.double()",
        f"        bad = {bad}",
        "        if values.is_floating_point():",
        "            bad = bad | torch.isnan(values)",
        '        low, high = (float(v.min()), float(v.max())) if v.numel() else (None, None)',
        '        print(f"{path}: {int(bad.sum())} of {v.numel()} draw(s) impossible; min {low}, max {high}")',
        "        impossible += int(bad.sum())",
    ]
    lines += _verdict("impossible", "every draw is one the distribution can produce")
    return lines + _data_block(call) + _footer()


def _isolation(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    constants = [f"HANG_SECONDS = {_HANG_SECONDS!r}  # a child still running after this hangs"]
    lines = _preamble(finding, call, torch_version, (), constants, imports=("os", "subprocess"))
    lines += _function_lines(call)
    lines += _tensors_function(call)
    lines += _start_main(call, f"the call must return (it was seen to {'crash' if finding.kind == 'crash' else 'hang'})")
    lines += [
        '    if os.environ.get("TORCHSLEUTH_REPRO_CHILD"):  # the child: make the call',
        "        torch.manual_seed(CALL_SEED)",
        "        call(T)",
        "        return 0",
        "    # the parent: a crash kills only the child, so it can be told apart from an error",
        '    env = dict(os.environ, TORCHSLEUTH_REPRO_CHILD="1")',
        "    try:",
        "        child = subprocess.run([sys.executable, __file__], env=env, timeout=HANG_SECONDS)",
        "    except subprocess.TimeoutExpired:",
        '        print(f"BUG PRESENT: the call still runs after {HANG_SECONDS} s:", SUMMARY)',
        "        return 1",
        "    if child.returncode in (0, 2):  # returned, or raised (loud, so not this bug)",
        '        print("OK: the call returns" if child.returncode == 0 else "CANNOT CHECK: the call raised")',
        "        return child.returncode",
        '    print(f"BUG PRESENT: the call crashed the process (exit status {child.returncode}):", SUMMARY)',
        "    return 1",
    ]
    return lines + _data_block(call) + _footer()


_CHECKS = {
    "values": _values,
    "metadata": _values,
    "determinism": _determinism,
    "out_of_view_write": _storage_check,
    "input_mutated": _storage_check,
    "strides": _strides,
    "identity": _identity,
    "coverage": _coverage,
    "support": _support,
    "isolation": _isolation,
}
