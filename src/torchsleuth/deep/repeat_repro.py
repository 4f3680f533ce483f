"""The repro script of a ``repeat`` finding: A, then B with one number changed, then A again.

Design note. Built from the parts every torchsleuth script has
(report.repro) and a check of its own. The script rebuilds the sample's
tensors once and makes the three calls on them, as the oracle did (a fresh
copy of ``self`` for an in-place call), then checks the same two things:

1. the second A gives the first A's bits (unless two more calls of A,
   with nothing in between, disagree with each other: then the op is
   nondeterministic and nothing is concluded);
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
worst element. Exit 1 while either check fails, 0 once both
pass, 2 when a call raises. A crash or hang the sweep saw in such a case
gets the common isolation script (report.repro) for B's call.
"""

from __future__ import annotations

import ast
import dataclasses
import math

import torch

from ..judge.records import Finding
from ..dtypes import unit_roundoff
from ..judge.tolerance import PRECISION_MARGIN, table

_CHECK = '''

def copies(T, dtype=None, nudge=None):
    """Contiguous copies on the CPU, the case's dtype turned into ``dtype``, floats nudged by ``nudge``'s seed."""
    found = {}
    generator = torch.Generator().manual_seed(nudge) if nudge is not None else None
    for path, t in T.items():
        c = t.detach().cpu()
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
    """One call on ``T`` (a fresh self for an in-place call), seeded; its result copied at once."""
    U = dict(T)
    for path in WRITTEN:
        U[path] = T[path].detach().clone()
    torch.manual_seed(CALL_SEED)
    return [(p, v.detach().clone() if isinstance(v, torch.Tensor) else v) for p, v in leaves(function(U))]


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
    bug = False
    print("1. A again against A, bit for bit")
    if not compare(second, first, bitwise=True):
        third, fourth = once(call_a, T), once(call_a, T)
        if compare(fourth, third, bitwise=True):
            print("   A gives the same bits twice in a row, but other bits after B")
            bug = True
        else:
            print("   A alone gives other bits from call to call: nondeterministic, nothing concluded")
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


class _Retarget(ast.NodeTransformer):
    """The case's dtype to the reference's, and every device to the CPU."""

    def __init__(self, dtype: str, target: str | None):
        self.dtype, self.target = dtype, target

    def visit_keyword(self, node: ast.keyword) -> ast.keyword:
        self.generic_visit(node)
        if node.arg == "device" and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            node.value = ast.Constant("cpu")
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if self.target and ast.unparse(node) == f"torch.{self.dtype}":
            return ast.parse(f"torch.{self.target}", mode="eval").body
        return self.generic_visit(node)


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


def _changed_call(call, path: str, value):
    """``call`` (a CallSpec) with the number at ``path`` set to ``value``."""
    tree = ast.parse(_changed_source(f"f({', '.join(s for s in (call.args_src, call.kwargs_src) if s)})", path, value), mode="eval").body
    args = ", ".join(ast.unparse(a) for a in tree.args)
    kwargs = ", ".join(f"{k.arg}={ast.unparse(k.value)}" for k in tree.keywords)
    return dataclasses.replace(call, args_src=args, kwargs_src=kwargs)


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
    path, new = parse(Case.parse(finding.case_id).oracle)
    if finding.kind in ("crash", "hang"):  # the sweep saw the worker die: B's call, in a child process
        return "\n".join(common._CHECKS["isolation"](finding, _changed_call(call, path, new), torch_version))
    if finding.kind != "stale_result":
        return None
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
    source_a = common._call_source(call)
    source_b = _changed_source(source_a, path, new)
    old = next((p.split("=", 1)[1] for p in finding.detail.split(", ") if p.startswith(("A: ", "A:"))), "")
    constants = [
        f"CASE_DTYPE = {finding.dtype!r}",
        f"WAY = {way!r}  # how B's reference is made: from inputs no other call has used",
        f"REFERENCE_DTYPE = {target!r}",
        f"UNIT_ROUNDOFF = {max(unit_roundoff(getattr(torch, finding.dtype)), unit_roundoff(torch.float32))!r}  # the nudge: at least float32's roundoff",
        f"ATOL, RTOL = {atol!r}, {rtol!r}  # the tolerance table's for the references' precision, times {PRECISION_MARGIN:g}",
        f"SLACK = {slack!r}  # what torchsleuth's rule allowed beyond them at the worst element",
        f"WRITTEN = {tuple(s.path for s in call.tensors if call.variant == 'inplace' and (s.path == 'input' or s.path.startswith('input[')))!r}",
        f"CHANGE = {f'{path} changed from {old} to {_literal(new)},'!r}",
        f"CALL_A = {source_a!r}",
        f"CALL_B = {source_b!r}",
    ]
    lines = common._preamble(finding, call, torch_version, ("leaves", "compare"), constants)
    retarget = lambda source: ast.unparse(_Retarget(finding.dtype, target).visit(ast.parse(source, mode="eval").body))
    for name, source, what in (("call_a", source_a, "A: the call as the sample makes it"),
                               ("call_b", source_b, f"B: the same call with {path}={_literal(new)}"),
                               ("reference_b", retarget(source_b), "B on the reference's copies")):
        lines += ["", "", f"def {name}(T):", f'    """{what}."""', f"    return {source}"]
    lines += common._tensors_function(call)
    lines.append(_CHECK.rstrip("\n"))
    return "\n".join(lines + common._data_block(call) + common._footer())
