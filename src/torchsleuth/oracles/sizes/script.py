"""The repro script of a ``sizes`` finding: the same lengths, offset, layouts or batches, standalone.

Design note. The script is made of the parts every torchsleuth script has
(scripts.parts: the header, ``rebuild`` and the tensors' bytes, the call as
source, the footer), the oracles' elementwise rule (judge.elementwise:
``placed``, ``disagree``, ``report``) and a ``main`` of its own, written out
below. Everything it needs of the finding is the finding's ``Detail``
(sizes.detail, read back from ``Finding.data``): whether rows were batched
or values tiled, the lengths or rows per batch, where the batch dim went,
and what the rule allowed at the worst element. It rebuilds the sample's
tensors exactly, makes the same configurations as the oracle (run.lengths:
the tiles at every length, at a storage offset and in the layout forms,
strided and transposed, for a pointwise op; the batches of rolled rows for
a reduction), computes every value or row alone, and prints each element
that disagrees: its configuration, its position (row-major in a transposed
grid), both values. The layout forms are written out as plain
``as_strided`` views over poisoned storage, the same strides cases.layouts
gives them.

An element disagrees when the difference changes the class of the value
(NaN, infinity, the sign of a zero for pointwise ops that do not pick between
tied zeros), is in an integer or
bool result, or exceeds ``ATOL + RTOL * |alone| + SLACK``. ``ATOL`` and
``RTOL`` are the table's; ``SLACK`` is what the oracle's rule allowed beyond
them at the worst element (the op's measured sensitivity to rounding),
carried as one absolute amount: the script knows no float64 reference. So
one-ULP differences between a vectorised body and a scalar tail, which the
oracle's policy allows, do not fail the script. Exit 1 while an element
disagrees, 0 once none does, 2 when the call raises.
"""

from __future__ import annotations

from ...cases import layouts
from ...judge import elementwise
from ...judge.plugin import decode_detail
from ...judge.records import Finding
from ...run import lengths
from ...scripts import parts
from .detail import Detail

# Each main ends where parts.verdict takes over: exit 1 while ``wrong`` holds anything.
_TILES = '''

def tiles(T, longest):
    """The tensor arguments broadcast, flattened and tiled: element j holds value j % distinct."""
    dims = {p: t for p, t in T.items() if t.dim() > 0} or dict(T)
    shape = torch.broadcast_shapes(*(t.shape for t in dims.values()))
    distinct = min(shape.numel(), MAX_DISTINCT, longest)
    tiled = {}
    for p, t in dims.items():
        index = torch.arange(longest, device=t.device) % distinct
        tiled[p] = t.detach().expand(shape).reshape(-1)[:distinct][index].contiguous()
    kept = {p: t for p, t in T.items() if p not in dims}  # 0-dim tensors among dimensioned ones stay as they are
    return tiled, kept, distinct


def strided(t):
    """1-D ``t`` as every other element of a fresh storage, the gaps poisoned."""
    storage = torch.full((2 * t.numel() - 1 + 4,), poison(t.dtype), dtype=t.dtype, device=t.device)
    view = storage.as_strided(t.shape, (2,))
    view.copy_(t)
    return view


def transposed(t):
    """2-D ``t`` in a fresh storage, column-major: the op walks its columns."""
    storage = torch.full((t.numel() + 4,), poison(t.dtype), dtype=t.dtype, device=t.device)
    view = storage.as_strided(t.shape, (1, t.shape[0]))
    view.copy_(t)
    return view


def configurations(tiled, kept, distinct):
    """(label, elements, arguments, is a layout form) for every length, the offset, and the layout forms."""
    longest = max(LENGTHS)
    made = [(f"length {n}", n, {p: placed(t[:n]) for p, t in tiled.items()}, False) for n in LENGTHS]
    made.append((f"length {longest} at storage offset {OFFSET}", longest, {p: placed(t, OFFSET) for p, t in tiled.items()}, False))
    first = next(iter(tiled))
    for n in (n for n in LENGTHS if n > 1):
        made.append((f"strided length {n} (every other element)", n, {p: strided(t[:n]) for p, t in tiled.items()}, True))
        at = torch.arange(COLUMNS * n) % distinct
        grids = {p: t[:distinct][at.to(t.device)].reshape(n, COLUMNS) for p, t in tiled.items()}
        made.append((f"transposed length {n} ({n} x {COLUMNS}, columns of {n} in memory)", COLUMNS * n,
                     {p: transposed(g) for p, g in grids.items()}, True))
        if len(grids) > 1:
            made.append((f"length {n} ({n} x {COLUMNS}) with {first} transposed, the others contiguous", COLUMNS * n,
                         {p: transposed(g) if p == first else placed(g) for p, g in grids.items()}, True))
    return [(label, count, {**T, **kept}, form) for label, count, T, form in made]


def main():
    T = tensors()
    print("torchsleuth repro: an element's result must not depend on the tensor's length, where it starts or its layout")
    print("call:", CALL)
    describe(T)
    tiled, kept, distinct = tiles(T, max(LENGTHS))
    alone = [leaves(call({**{p: placed(t[j:j + 1]) for p, t in tiled.items()}, **kept})) for j in range(distinct)]
    reference = [(path, torch.cat([a[i][1].reshape(-1) for a in alone])) for i, (path, _) in enumerate(alone[0])]
    wrong = []
    for label, n, arguments, form in configurations(tiled, kept, distinct):
        try:
            result = leaves(call(arguments))
        except Exception as e:  # torchsleuth drops a layout form that raises: loud, not this bug
            if not form:
                raise
            print(f"{label}: the call raises ({type(e).__name__}: {e}); not checked")
            continue
        at = torch.arange(n) % distinct
        for (path, a), (_, values) in zip(result, reference):
            a = a.reshape(-1)
            e = values[at.to(values.device)]
            bad = disagree(a, e, signed_zero=SIGNED_ZERO)
            if bool(bad.any()):
                wrong.append(label)
                report(label, path, a, e, bad, lambda i: f"element {i} (value {i % distinct})")
    sample = leaves(call(T))  # the sample's own call, flattened, where each element has its value alone
    if all(isinstance(v, torch.Tensor) and v.numel() == distinct for _, v in sample):
        for (path, a), (_, e) in zip(sample, reference):
            bad = disagree(a.reshape(-1), e, signed_zero=SIGNED_ZERO)
            if bool(bad.any()):
                wrong.append("the sample's shape")
                report(f"the sample's shape {list(a.shape)}", path, a.reshape(-1), e, bad, lambda i: f"element {i}")
    if wrong:
        print("disagrees in:", ", ".join(dict.fromkeys(wrong)))
'''

_ROWS = '''

def batched(rows, rows_inner):
    """The rows stacked along the new dim, the rows innermost or outermost in memory."""
    if rows_inner:
        stacked = placed(torch.stack(rows, dim=-1))
        return stacked.movedim(-1, 0) if FRONT else stacked
    stacked = placed(torch.stack(rows, dim=0))
    return stacked if FRONT else stacked.movedim(0, -1)


def main():
    T = tensors()
    print("torchsleuth repro: each row of a batch must reduce to what the row gives alone")
    print("call:", CALL)
    describe(T)
    x = T["input"]
    flat = x.detach().reshape(-1)
    rows = [torch.roll(flat, b).reshape(x.shape).contiguous() for b in range(max(ROWS))]
    alone = [leaves(call({"input": placed(r)})) for r in rows]
    axis = 0 if FRONT else -1
    wrong = []
    for k in ROWS:
        expected = [(path, torch.stack([a[i][1] for a in alone[:k]], dim=axis)) for i, (path, _) in enumerate(alone[0])]
        for rows_inner in (False, True):
            label = f"a batch of {k} rows ({'innermost' if rows_inner else 'outermost'} in memory)"
            result = leaves(call({"input": batched(rows[:k], rows_inner)}))
            for (path, a), (_, e) in zip(result, expected):
                bad = disagree(a, e, signed_zero=False)
                if bool(bad.any()):
                    wrong.append(label)
                    shape = list(a.shape)
                    report(label, path, a, e, bad, lambda i: f"index {[int(j) for j in torch.unravel_index(torch.tensor(i), shape)]}")
    if wrong:
        print("disagrees in:", ", ".join(dict.fromkeys(wrong)))
'''


def script(finding: Finding, torch_version: str) -> str | None:
    """The finding's standalone script; None where the generic one applies (no call to write out)."""
    call = finding.call
    if finding.kind in ("crash", "hang"):
        return parts.died_in_steps(finding, torch_version, "the sizes oracle's own calls (the tensors it tiles from the sample)")
    if finding.kind != "size_variance" or parts.writable_call(finding) is None:
        return None  # the generic script says why there is none
    detail = decode_detail(Detail, finding)
    if detail is None:
        return parts.no_record(finding, torch_version, "the oracle's configurations")
    m = finding.mismatch
    constants = elementwise.constants(atol=m.atol if m else 0.0, rtol=m.rtol if m else 0.0, slack=detail.slack,
                                      reference="alone" if detail.reduction else "alone (length 1)")
    constants.append(f"CALL = {parts.call_source(call)!r}")
    if detail.reduction:
        constants += [
            f"ROWS = {detail.sizes!r}  # rows per batch",
            f"FRONT = {detail.front!r}  # the batch is a new first dim (else a new last one)",
        ]
        main, fixed = _ROWS, "every row of every batch reduces to what it gives alone"
    else:
        constants += [
            f"LENGTHS = {detail.sizes!r}",
            f"COLUMNS = {lengths.COLUMNS}  # the transposed forms are LENGTH x COLUMNS, column-major",
            f"OFFSET = {layouts.OFFSET}  # a storage offset that breaks vector alignment",
            f"MAX_DISTINCT = {lengths.MAX_DISTINCT}",
            f"SIGNED_ZERO = {detail.signed_zero!r}  # +0 against -0 disagrees (False: the op picks between tied zeros, either is right)",
        ]
        main, fixed = _TILES, "every element gives the same result at every length, offset and layout as alone"
    lines = parts.preamble(finding, call, torch_version, ("leaves", *elementwise.KIT), constants)
    lines += parts.function_lines(call) + parts.tensors_function(call)
    lines += ["", "", elementwise.source("placed", "disagree", "report").rstrip("\n"), main.rstrip("\n")]
    return "\n".join(lines + parts.verdict("wrong", fixed) + parts.data_block(call) + parts.footer())
