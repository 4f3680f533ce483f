"""The repro script of an ``alias`` finding: the aliased call against the same call unaliased.

Design note. The generic script (report.repro) rebuilds every argument in a
storage of its own, which is exactly what an aliasing bug needs not to have.
This one rebuilds the storage the finding's arguments shared and views it
again (the very same tensor where the form passes one tensor twice), then

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
cannot be made (the unaliased call raises). The script needs only torch and
the modules the sweep loaded with ``--import`` (recorded in the finding's
detail), which it imports first.
"""

from __future__ import annotations

import base64
import re

from .._version import __version__
from .alias_forms import SAME_TENSOR, Form

_LINE = 76

_HELPERS = '''
def rebuild(dtype, device, numel, shape, stride, offset, data=None, seed=0):
    """One argument exactly as the kernel saw it: its whole storage (guards included), viewed."""
    dtype = getattr(torch, dtype)
    if data is not None:
        raw = bytearray(zlib.decompress(base64.b85decode("".join(data))))
        flat = torch.frombuffer(raw, dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
    else:  # too large to carry inline: seeded values stand in
        generator = torch.Generator().manual_seed(seed)
        if dtype.is_floating_point or dtype.is_complex:
            flat = torch.randn(numel, generator=generator, dtype=torch.float64).to(dtype)
        else:
            flat = torch.randint(0, 10, (numel,), generator=generator).to(dtype)
    return flat.to(device).as_strided(shape, stride, offset)


def copies(T):
    """Unaliased contiguous copies: every argument in a storage of its own."""
    return {path: t.detach().clone(memory_format=torch.contiguous_format) for path, t in T.items()}


def storage_bytes(t):
    """The bytes of every element of t's whole storage, one row an element."""
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))
    return flat.detach().cpu().clone().view(torch.uint8).reshape(n, t.element_size())


def covered(T, paths):
    """Which elements of the paths' (one) storage their views cover."""
    n = T[paths[0]].untyped_storage().nbytes() // T[paths[0]].element_size()
    mask = torch.zeros(n, dtype=torch.bool)
    for path in paths:
        t = T[path]
        if t.numel():
            mask[torch.arange(n).as_strided(t.shape, t.stride(), t.storage_offset()).reshape(-1)] = True
    return mask


def differ(actual, expected):
    """Elementwise: where actual is not expected within ATOL + RTOL * |expected| (NaN matches NaN)."""
    a, e = actual.detach().cpu(), expected.detach().cpu()
    if a.shape != e.shape:
        return None
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        return a != e.to(a.dtype)
    work = torch.complex128 if a.is_complex() else torch.float64
    a, e = a.to(work), e.to(work)
    close = torch.isfinite(e) & ((a - e).abs() <= ATOL + RTOL * e.abs())
    nan = torch.isnan(a) & torch.isnan(e)
    return ~((a == e) | nan | close)


def show(path, actual, expected, bad):
    """The count, and the first few elements that differ: wrong (aliased) and right (unaliased)."""
    if bad is None:
        print(f"  {path}: shape {list(actual.shape)}, but the unaliased call gives shape {list(expected.shape)}")
        return
    print(f"  {path}: {int(bad.sum())} of {actual.numel()} element(s) differ from the unaliased call")
    a, e = actual.detach().cpu().reshape(-1), expected.detach().cpu().reshape(-1)
    for i in bad.reshape(-1).nonzero().reshape(-1)[:6].tolist():
        index = [int(j) for j in torch.unravel_index(torch.tensor(i), actual.shape)] if actual.dim() else []
        print(f"    {path}{index}: aliased {a[i].item()!r}, unaliased {e[i].item()!r}")
'''

_MAIN = '''

def main():
    kept = [runpy.run_path(name) if name.endswith(".py") else importlib.import_module(name) for name in IMPORTS]  # noqa: F841
    if THREADS:
        torch.set_num_threads(THREADS)
    T = tensors()
    R = copies(T)
    print("torchsleuth repro: an aliased call must raise or give the unaliased result")
    print("aliasing:", ALIASING)
    print("call:", CALL)
    try:
        torch.manual_seed(CALL_SEED)
        call(R)
    except Exception:
        traceback.print_exc()
        print("CANNOT CHECK: the unaliased call raises")
        return 2
    storages = {}
    for path in WRITTEN:
        storages.setdefault(T[path].untyped_storage().data_ptr(), []).append(path)
    before = {ptr: storage_bytes(T[paths[0]]) for ptr, paths in storages.items()}
    try:
        torch.manual_seed(CALL_SEED)
        call(T)
    except Exception as e:
        print(f"OK: the aliased call raises ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        return 0
    wrong = 0
    for path in WRITTEN:
        if path in SHARED:
            continue
        bad = differ(T[path], R[path])
        if bad is None or bool(bad.any()):
            show(path, T[path], R[path], bad)
            wrong += 1
    if SHARED:
        tensor = T[SHARED[0]]
        verdicts = {path: differ(tensor, R[path]) for path in SHARED}
        if all(bad is None or bool(bad.any()) for bad in verdicts.values()):
            print(f"  one tensor was given for {SHARED[0]} and {SHARED[1]}: it holds neither result entirely")
            for path, bad in verdicts.items():
                show(f"{path}'s result", tensor, R[path], bad)
            wrong += 1
    for ptr, paths in storages.items():
        after = storage_bytes(T[paths[0]])
        if after.shape != before[ptr].shape:
            continue
        outside = (after != before[ptr]).any(-1) & ~covered(T, paths)
        if bool(outside.any()):
            where = outside.nonzero().reshape(-1)[:8].tolist()
            print(f"  {int(outside.sum())} element(s) of the storage of {', '.join(paths)} outside the written view(s) changed, at storage indices {where}")
            wrong += 1
    if wrong:
        print("BUG PRESENT:", SUMMARY)
        return 1
    print("OK: the aliased call gives the unaliased result and writes nothing else")
    return 0


if __name__ == "__main__":
    try:
        status = main()
    except Exception:
        traceback.print_exc()
        print("CANNOT CHECK: the script failed")
        status = 2
    sys.exit(status)
'''


def _alias(form: Form) -> tuple[str, str]:
    """(the path rebuilt as a view, the path whose storage it views)."""
    if form.name in ("out-is-input", "out-overlaps-input"):
        return form.written, form.read
    return form.read, form.written


def _imports(detail: str) -> tuple[str, ...]:
    marker = "; with --import "
    return tuple(detail.split(marker, 1)[1].split(", ")) if marker in detail else ()


def _threads(detail: str) -> int | None:
    found = re.search(r"; (\d+) intra-op thread", detail)
    return int(found.group(1)) if found else None


def script(finding, torch_version: str) -> str | None:
    """The script of one alias finding, or None when its call cannot be written (the generic script says why)."""
    from ..cases.records import Case

    spec = finding.call
    if spec is None or spec.why_not or not spec.function:
        return None
    form = Form.parse(Case.parse(finding.case_id).oracle)
    view, source = _alias(form)
    specs = {t.path: t for t in spec.tensors}
    if view not in specs or source not in specs:
        return None
    m = finding.mismatch
    atol, rtol = (m.atol, m.rtol) if m is not None else (0.0, 0.0)
    written = ("input",) if finding.variant == "inplace" else tuple(p for p in specs if p == "out" or p.startswith("out["))
    call_source = f"{spec.function}({', '.join(s for s in (spec.args_src, spec.kwargs_src) if s)})"
    header = [
        f"# torchsleuth repro for finding {finding.id}",
        "#",
        f"#   op         {finding.op} (OpInfo {finding.opinfo!r}), {finding.variant} variant, {finding.dtype} on {finding.device}",
        f"#   kind       {finding.kind}, judged against the {finding.reference} reference",
        f"#   finding    {' '.join(finding.summary.split())}",
    ]
    if m is not None:
        header.append(f"#   mismatch   {' '.join(m.describe().split())}")
    header.append(f"#   aliasing   {form.words()}")
    for t in spec.tensors:
        header.append(f"#   argument   {t.path}: {t.layout}, shape {list(t.shape)}, stride {list(t.stride)}, offset {t.storage_offset}")
    header += [
        f"#   found with torch {torch_version}, torchsleuth {__version__}",
        f"#   case       {finding.case_id}",
        "#",
        f"# Run it with the torch under test:  python {finding.id}.py",
        "# Exit status: 1 while the bug is present; 0 once it is gone (the aliased call is right, or raises:",
        "# refusing an aliasing is always right); 2 when it cannot be checked.",
        "# It needs only torch (and the modules listed in IMPORTS: the sweep's --import).",
        "",
        "import base64",
        "import importlib",
        "import runpy",
        "import sys",
        "import traceback",
        "import zlib",
        "",
        "import torch",
        "",
        "CALL_SEED = 20260405  # torchsleuth seeds every call with this",
        f"SUMMARY = {' '.join(finding.summary.split())!r}",
        f"IMPORTS = {_imports(finding.detail)!r}",
        f"THREADS = {_threads(finding.detail)!r}  # intra-op threads of the sweep's worker: which elements a kernel reads after writing them can depend on it",
        f"ALIASING = {form.words()!r}",
        f"CALL = {call_source!r}",
        f"ATOL, RTOL = {atol!r}, {rtol!r}  # |aliased - unaliased| <= ATOL + RTOL * |unaliased|; integers exact",
        f"WRITTEN = {written!r}  # the tensors the call writes",
        f"SHARED = {(form.written, form.read) if form.name == 'shared-out' else ()!r}  # one tensor for two outputs: it must hold one result entirely",
    ]
    lines = header + ["", "", _HELPERS.strip("\n"), "", "", "def call(T):", f"    return {call_source}", ""]
    lines += ["", "def tensors():", '    """The arguments exactly as the kernel saw them, aliasing included."""', "    T = {}"]
    for seed, t in enumerate(spec.tensors):
        if t.path == view:
            continue
        data = f"DATA[{t.path!r}]" if t.data is not None else f"seed={seed}"
        lines.append(f"    T[{t.path!r}] = rebuild({t.dtype!r}, {t.device!r}, {t.storage_numel}, {tuple(t.shape)!r}, {tuple(t.stride)!r}, {t.storage_offset}, {data})")
    aliased = specs[view]
    if form.name in SAME_TENSOR:
        lines.append(f"    T[{view!r}] = T[{source!r}]  # the very same tensor")
    else:
        lines.append(f"    T[{view!r}] = T[{source!r}].as_strided({tuple(aliased.shape)!r}, {tuple(aliased.stride)!r}, {aliased.storage_offset})  # a view of {source}'s storage")
    lines.append("    return T")
    lines += _data(spec.tensors, skip=view)
    return "\n".join(lines) + _MAIN


def _data(tensors, *, skip: str) -> list[str]:
    inline = [t for t in tensors if t.data is not None and t.path != skip]
    if not inline:
        return []
    lines = ["", "", "# Each storage's bytes, zlib-compressed and base85-encoded.", "DATA = {"]
    for t in inline:
        text = base64.b85encode(t.data).decode("ascii")
        chunks = [text[i:i + _LINE] for i in range(0, len(text), _LINE)] or [""]
        lines.append(f"    {t.path!r}: (")
        lines += [f'        "{chunk}",' for chunk in chunks]
        lines.append("    ),")
    lines.append("}")
    return lines
