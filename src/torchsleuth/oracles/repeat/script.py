"""The repro script of a ``repeat`` finding: A, then B with one number or the dtype changed, then A again.

Design note. Built from the parts every torchsleuth script has
(report.repro) and a check of its own. The script rebuilds the sample's
tensors once and makes the three calls on them, as the oracle did (a fresh
copy of ``self`` for an in-place call; whatever a call writes by contract
put back after it), then checks what the oracle checked. Both forms share
the first check:

1. the second A gives the first A's bits (unless two more calls of A,
   with nothing in between, disagree with each other: then the op is
   nondeterministic and nothing is concluded).

With a number changed (``repeat:alpha=0.5``), B is the call with that
number set, and the second check is

2. B is not A's result where it should not be: an element is stale when B
   holds A's bits there, B disagrees with B's reference beyond
   ``ATOL + RTOL * |reference| + SLACK``, and A's reference disagrees with
   B's reference there too.

The references are made the way the oracle made them, so that no cache
can serve them: for a floating case, the call in float64 (complex128) on
the CPU on copies nudged by up to one unit of roundoff (and three more
times, with other nudges: how far those land from the first is the op's
sensitivity, and sixteen times it is allowed on top); for an integer case, the call on the CPU in
another integer dtype (or the same one, for a case on another device),
exactly. ``SLACK`` is what the oracle's rule allowed beyond the table at the
worst element.

With another dtype (``repeat:dtype=float64``), B is the call on copies of
the tensors with every tensor of the case's dtype in the other, on the same
device (dtype arguments of the case's dtype turned too), and the second
check is

2. each tensor of B's result has the dtype the same call gives on the meta
   device, which no kernel cache serves (an op without a meta kernel: only
   the first check, as in the oracle).

Exit 1 while either check fails, 0 once both pass, 2 when a call (A or B)
raises. A crash or hang the sweep saw in such a case gets the common
isolation script (report.repro) for B's call: the number changed, or the
tensors' bytes turned into the other dtype.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import zlib

import torch

from ..judge.records import Finding
from ..dtypes import unit_roundoff
from ..judge.tolerance import PRECISION_MARGIN, table

# The parts both forms' scripts share.
_SHARED = '''

def copies(T, dtype=None, nudge=None, device="cpu"):
    """Contiguous copies on ``device`` in fresh storages, the case's dtype turned into ``dtype``, floats nudged by ``nudge``'s seed."""
    found = {}
    generator = torch.Generator().manual_seed(nudge) if nudge is not None else None
    for path, t in T.items():
        c = t.detach().to(device)
        if dtype is not None and c.dtype == getattr(torch, CASE_DTYPE):
            c = c.to(getattr(torch, dtype))
        if generator is not None and (c.is_floating_point() or c.is_complex()):
            real = torch.view_as_real(c) if c.is_complex() else c
            delta = (torch.rand(real.shape, generator=generator, dtype=torch.float64) * 2 - 1) * UNIT_ROUNDOFF
            real = real * (1 + delta)
            c = torch.view_as_complex(real.contiguous()) if c.is_complex() else real
        found[path] = c.clone(memory_format=torch.contiguous_format)
    return found


def once(function, T):
    """One call on ``T`` (a fresh self for an in-place call), seeded; its result copied at once.

    Whatever the call wrote into ``T`` by contract (batch norm's running
    statistics) is put back after it, so every call sees what the first saw.
    """
    U = dict(T)
    for path in WRITTEN:
        U[path] = T[path].detach().clone()
    saved = [(t.untyped_storage(), t.untyped_storage().clone()) for t in T.values()]
    torch.manual_seed(CALL_SEED)
    try:
        return [(p, v.detach().clone() if isinstance(v, torch.Tensor) else v) for p, v in leaves(function(U))]
    finally:
        for storage, before in saved:
            storage.copy_(before)


def again(T, first, second):
    """Check 1: True when the second A's bits differ from the first's and A alone gives the same bits twice."""
    print("1. A again against A, bit for bit")
    if compare(second, first, bitwise=True):
        return False
    third, fourth = once(call_a, T), once(call_a, T)
    if compare(fourth, third, bitwise=True):
        print("   A gives the same bits twice in a row, but other bits after B")
        return True
    print("   A alone gives other bits from call to call: nondeterministic, nothing concluded")
    return False
'''

# The number form's own check.
_NUMBER = '''

def far(a, e, spread=None):
    """Elementwise: ``a`` disagrees with the reference ``e`` beyond what rounding allows."""
    a, e = a.detach().cpu(), e.detach().cpu()
    if not (a.is_floating_point() or a.is_complex()):
        return a != e.to(a.dtype)
    work = torch.complex128 if a.is_complex() or e.is_complex() else torch.float64
    a, e = a.to(work), e.to(work)
    allowed = ATOL + RTOL * e.abs() + SLACK + (0 if spread is None else 16 * spread)
    both_nan = torch.isnan(a) & torch.isnan(e)
    close = torch.isfinite(e) & ((a - e).abs() <= allowed)
    return ~((a == e) | both_nan | close)


def main():
    T = tensors()
    print("torchsleuth repro: A, then B with", CHANGE, "then A again, on the same tensors")
    print("A:", CALL_A)
    print("B:", CALL_B)
    describe(T)
    first = once(call_a, T)
    b = once(call_b, T)
    second = once(call_a, T)
    bug = again(T, first, second)
    if WAY is None:
        print("2. no reference that a cache cannot share: B not judged")
    else:
        print(f"2. B against its reference ({WAY})")
        nudged = WAY == "nudged float64"
        expected = once(reference_b, copies(T, REFERENCE_DTYPE, nudge=1 if nudged else None))
        others = [once(reference_b, copies(T, REFERENCE_DTYPE, nudge=seed)) for seed in (2, 3, 4)] if nudged else [expected]
        for i, ((path, x), (_, y), (_, e)) in enumerate(zip(b, first, expected)):
            spread = None
            if not all(isinstance(v, torch.Tensor) for v in (x, y, e)) or x.shape != y.shape or x.shape != e.shape:
                continue
            if nudged and (e.is_floating_point() or e.is_complex()):  # how far other nudges land: the op's sensitivity
                spread = torch.stack([(e - o[i][1]).abs().to(torch.float64) for o in others]).amax(0)
            wanted = e.to(x.dtype) if nudged else e
            stale = far(x, wanted, spread) & same_bits(x, y).reshape(x.shape)
            count = int(stale.sum())
            print(f"   {path}: {count} of {x.numel()} element(s) hold A's result where B's reference says otherwise")
            if count:
                i = int(stale.reshape(-1).to(torch.uint8).argmax())
                print(f"   e.g. element {i}: B gave {fmt(x.reshape(-1)[i])}, as A did; B's reference says {fmt(e.reshape(-1)[i])}")
                bug = True
    if bug:
        print("BUG PRESENT:", SUMMARY)
        return 1
    print("OK: the changed number is not ignored")
    return 0
'''

# The dtype form's own check.
_DTYPE = '''

def main():
    T = tensors()
    print("torchsleuth repro: A, then B in another dtype, then A again")
    print("A:", CALL_A, "on T")
    print("B:", CALL_B, f"on copies of T, every {CASE_DTYPE} tensor in {OTHER_DTYPE}")
    describe(T)
    first = once(call_a, T)
    b = once(call_b, copies(T, OTHER_DTYPE, device=CASE_DEVICE))
    second = once(call_a, T)
    bug = again(T, first, second)
    print("2. B's dtypes against the same call on the meta device (no kernel cache serves it)")
    try:
        expected = dict(leaves(call_meta(copies(T, OTHER_DTYPE, device="meta"))))
    except Exception as e:
        print(f"   the op has no meta kernel to say B's dtypes ({type(e).__name__}): only A again was judged")
        expected = {}
    for path, value in b:
        want = expected.get(path)
        if isinstance(value, torch.Tensor) and isinstance(want, torch.Tensor):
            print(f"   {path}: {value.dtype}, the meta device says {want.dtype}")
            if value.dtype != want.dtype:
                bug = True
    if bug:
        print("BUG PRESENT:", SUMMARY)
        return 1
    print("OK: the call in another dtype in between changes nothing it should not")
    return 0
'''


class _Retarget(ast.NodeTransformer):
    """The case's dtype to ``target``; ``device=`` keywords to ``keywords``, ``torch.device(...)`` to ``objects``, where given."""

    def __init__(self, dtype: str, target: str | None, *, keywords: str | None = None, objects: str | None = None):
        self.dtype, self.target, self.keywords, self.objects = dtype, target, keywords, objects

    def visit_keyword(self, node: ast.keyword) -> ast.keyword:
        self.generic_visit(node)
        if self.keywords and node.arg == "device" and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            node.value = ast.Constant(self.keywords)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if self.objects and ast.unparse(node.func) == "torch.device":
            return ast.parse(f"torch.device({self.objects!r})", mode="eval").body
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if self.target and ast.unparse(node) == f"torch.{self.dtype}":
            return ast.parse(f"torch.{self.target}", mode="eval").body
        return self.generic_visit(node)


def _retargeted(source: str, dtype: str, target: str | None, **devices) -> str:
    return ast.unparse(_Retarget(dtype, target, **devices).visit(ast.parse(source, mode="eval").body))


def _changed_source(source: str, path: str, value) -> str:
    """The call's source with the number at ``path`` (``args[i]`` or a keyword) set to ``value``."""
    tree = ast.parse(source, mode="eval").body
    assert isinstance(tree, ast.Call)
    literal = ast.parse(_literal(value), mode="eval").body
    if path.startswith("args["):
        tree.args[int(path[5:-1]) + 1] = literal  # the call's first argument is the input
    else:
        for keyword in tree.keywords:
            if keyword.arg == path:
                keyword.value = literal
    return ast.unparse(tree)


def _rewritten_call(call, rewrite):
    """``call`` (a CallSpec) with its arguments' source rewritten by ``rewrite`` (the source of a call ``f(...)``)."""
    tree = ast.parse(rewrite(f"f({', '.join(s for s in (call.args_src, call.kwargs_src) if s)})"), mode="eval").body
    args = ", ".join(ast.unparse(a) for a in tree.args)
    kwargs = ", ".join(f"{k.arg}={ast.unparse(k.value)}" for k in tree.keywords)
    return dataclasses.replace(call, args_src=args, kwargs_src=kwargs)


def _changed_call(call, path: str, value):
    """``call`` (a CallSpec) with the number at ``path`` set to ``value``."""
    return _rewritten_call(call, lambda source: _changed_source(source, path, value))


def _retyped_call(call, dtype: str, other: str):
    """``call`` (a CallSpec) with every tensor of ``dtype`` (its bytes converted) and dtype argument in ``other``."""
    def retyped(spec):
        if spec.dtype != dtype:
            return spec
        data = spec.data
        if data is not None:
            raw = bytearray(zlib.decompress(data))
            flat = torch.frombuffer(raw, dtype=torch.uint8).view(getattr(torch, dtype)) if raw else torch.empty(0, dtype=getattr(torch, dtype))
            data = zlib.compress(flat.to(getattr(torch, other)).view(torch.uint8).numpy().tobytes())
        return dataclasses.replace(spec, dtype=other, data=data)

    call = _rewritten_call(call, lambda source: _retargeted(source, dtype, other))
    return dataclasses.replace(call, tensors=tuple(retyped(s) for s in call.tensors))


def _literal(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def _reference_dtype(way: str | None, dtype: str) -> str | None:
    if way == "nudged float64":
        return "complex128" if "complex" in dtype else "float64"
    if way == "int":
        return "int32" if dtype == "int64" else "int64"
    return None


def script(finding: Finding, torch_version: str) -> str | None:
    from ..cases.records import Case
    from ..report import repro as common  # the parts every script shares
    from .repeat import parse

    call = finding.call
    if call is None or not call.function or call.why_not:
        return None
    oracle = Case.parse(finding.case_id).oracle
    other = oracle.removeprefix("repeat:dtype=") if oracle.startswith("repeat:dtype=") else None
    if finding.kind in ("crash", "hang"):  # the sweep saw the worker die: B's call, in a child process
        b_call = _retyped_call(call, finding.dtype, other) if other else _changed_call(call, *parse(oracle))
        return "\n".join(common._CHECKS["isolation"](finding, b_call, torch_version))
    if finding.kind != "stale_result":
        return None
    source_a = common._call_source(call)
    if other:
        constants, functions, check = _dtype_parts(finding, source_a, other)
    else:
        constants, functions, check = _number_parts(finding, source_a, *parse(oracle))
    written = tuple(s.path for s in call.tensors if call.variant == "inplace" and (s.path == "input" or s.path.startswith("input[")))
    constants = [f"CASE_DTYPE = {finding.dtype!r}", *constants, f"WRITTEN = {written!r}  # an in-place call gets a fresh copy of these",
                 f"CALL_A = {source_a!r}", f"CALL_B = {functions[0][1]!r}"]
    lines = common._preamble(finding, call, torch_version, ("leaves", "compare"), constants)
    for name, source, what in (("call_a", source_a, "A: the call as the sample makes it"), *functions):
        lines += ["", "", f"def {name}(T):", f'    """{what}."""', f"    return {source}"]
    lines += common._tensors_function(call)
    lines += [_SHARED.rstrip("\n"), check.rstrip("\n")]
    return "\n".join(lines + common._data_block(call) + common._footer())


def _number_parts(finding: Finding, source_a: str, path: str, new) -> tuple[list[str], list[tuple[str, str, str]], str]:
    """The number form's constants, functions (B's first) and check."""
    from .repeat import _way

    way = _way(getattr(torch, finding.dtype), finding.device)
    target = _reference_dtype(way, finding.dtype)
    tol = table(getattr(torch, finding.dtype)) if way == "nudged float64" else None
    atol, rtol = (PRECISION_MARGIN * tol.atol, PRECISION_MARGIN * tol.rtol) if tol else (0.0, 0.0)
    m = finding.mismatch
    slack = 0.0
    if tol and m is not None and m.allowed is not None and math.isfinite(m.allowed) and "A again" not in finding.detail:
        try:
            slack = max(0.0, m.allowed - atol - rtol * abs(float(m.expected)))
        except ValueError:
            slack = 0.0
    source_b = _changed_source(source_a, path, new)
    old = next((p.split("=", 1)[1] for p in finding.detail.split(", ") if p.startswith(("A: ", "A:"))), "")
    constants = [
        f"WAY = {way!r}  # how B's reference is made: from inputs no other call has used",
        f"REFERENCE_DTYPE = {target!r}",
        f"UNIT_ROUNDOFF = {max(unit_roundoff(getattr(torch, finding.dtype)), unit_roundoff(torch.float32))!r}  # the nudge: at least float32's roundoff",
        f"ATOL, RTOL = {atol!r}, {rtol!r}  # the tolerance table's for the references' precision, times {PRECISION_MARGIN:g}",
        f"SLACK = {slack!r}  # what torchsleuth's rule allowed beyond them at the worst element",
        f"CHANGE = {f'{path} changed from {old} to {_literal(new)},'!r}",
    ]
    functions = [("call_b", source_b, f"B: the same call with {path}={_literal(new)}"),
                 ("reference_b", _retargeted(source_b, finding.dtype, target, keywords="cpu"), "B on the reference's copies")]
    return constants, functions, _NUMBER


def _dtype_parts(finding: Finding, source_a: str, other: str) -> tuple[list[str], list[tuple[str, str, str]], str]:
    """The dtype form's constants, functions (B's first) and check."""
    constants = [
        f"OTHER_DTYPE = {other!r}  # B's tensors of the case's dtype, and its dtype arguments, in this one",
        f"CASE_DEVICE = {finding.device!r}  # B's copies stay on the case's device",
        "ATOL, RTOL = 0.0, 0.0  # unused: A is compared with A bit for bit, B by its dtypes",
    ]
    functions = [("call_b", _retargeted(source_a, finding.dtype, other), f"B: the same call on the copies in {other}"),
                 ("call_meta", _retargeted(source_a, finding.dtype, other, objects="meta"),
                  "B on the meta device, whose result has the dtypes the op gives for B's inputs")]
    return constants, functions, _DTYPE
