"""The repro scripts of ``large`` findings: the same large tensor, the same positions, standalone.

Design note. An element probe's script is made of the parts every
torchsleuth script has (scripts.parts: the header, ``rebuild`` and the
tensors' bytes, the call as source, the footer), the oracles' elementwise
rule (judge.elementwise: ``disagree``, ``report``) and a ``main`` written
out below: it tiles the sample's values to the probe's length, makes the
call once and the short call once, and compares the positions read. An
index probe's script needs no sample: it makes the tiled tensor
(large.index's ``tiled``, copied in), runs the probe's call as the oracle's
``FORMS`` writes it, and checks the positions indexed and, for a scatter,
their shadows against the formula. A creation probe's script likewise makes
the factory's call as large.creation's ``FORMS`` writes it and checks the
positions read against the form's formula, with creation's own ``wrong``
(and ``triangle``, ``dirty``) copied in. Everything a script needs of the
finding is its ``Detail`` (large.detail, read back from ``Finding.data``).
A stretched case's finding is the judge's own: the generic script.
"""

from __future__ import annotations

import inspect

from ...judge import elementwise
from ...judge.plugin import decode_detail
from ...judge.records import Finding
from ...scripts import parts
from . import creation, index
from .detail import Detail

# Each main ends where parts.verdict takes over: exit 1 while ``wrong`` holds anything.
_ELEMENTS = '''

def main():
    T = tensors()
    print(f"torchsleuth repro: elements of a tensor of {N} elements must get what the same values get in a short one")
    print("call:", CALL)
    describe(T)
    dims = {p: t for p, t in T.items() if t.dim() > 0}
    kept = {p: t for p, t in T.items() if p not in dims}
    shape = torch.broadcast_shapes(*(t.shape for t in dims.values()))
    distinct = min(shape.numel(), DISTINCT)
    distinct -= 1 - distinct % 2  # odd, as torchsleuth tiled them
    values = {p: t.detach().expand(shape).reshape(-1)[:distinct].contiguous() for p, t in dims.items()}
    short = leaves(call({**kept, **values}))
    big = {p: t.repeat(-(-N // distinct))[:N] for p, t in values.items()}  # element i holds value i % distinct
    result = leaves(call({**kept, **big}))
    del big
    at = torch.tensor(POSITIONS)
    wrong = False
    for (path, a), (_, e) in zip(result, short):
        a, e = a.reshape(-1)[at.to(a.device)], e[(at % distinct).to(e.device)]
        bad = disagree(a, e, signed_zero=True)
        if bool(bad.any()):
            wrong = True
            report(f"{N} elements", path, a, e, bad, lambda i: f"element {POSITIONS[i]} (value {POSITIONS[i] % distinct})")
'''

_INDEX = '''

def main():
    print(f"torchsleuth repro: an indexing op on a tensor of {N} elements must reach the elements it is given")
    print("call:", CALL)
    D = DISTINCT
    TABLE = torch.arange(D, device=DEVICE).to(DTYPE)
    big = tiled(N, TABLE)  # element i holds i % D
    at = torch.tensor(AT, device=DEVICE)
    new = TABLE[(at + 1) % D]  # what a scatter writes: another value than the one there
    result = $CALL
    if WRITES:  # the indexed elements, then the ones a wrapped offset would reach instead
        checked = torch.cat([at, torch.tensor(SHADOWS, dtype=torch.int64, device=DEVICE)])
        expected = TABLE[checked % D]
        expected[:len(at)] = $WRITTEN
        actual = big[checked]
    else:
        checked = ($READ).reshape(-1)
        expected, actual = TABLE[checked % D], result.reshape(-1)
    wrong = (actual != expected).cpu().nonzero().reshape(-1).tolist()
    for i in wrong[:5]:
        where = "indexed element" if WRITES and i < len(at) else "element"
        print(f"    {where} {int(checked[i])}: {actual[i].item()!r} here, {expected[i].item()!r} expected")
    if wrong:
        print(f"{len(wrong)} of {len(checked)} elements checked are wrong")
'''

_CREATION = '''

def main():
    print(f"torchsleuth repro: a tensor of {N} elements made by a factory must hold what its formula gives at each index")
    print("call:", CALL)
    t = $BEFORE  # a template or out= buffer, made first
    dirty(N * DTYPE.itemsize, DEVICE)
    result = $CALL
    del t
    i = torch.tensor(POSITIONS)
    actual = result.reshape(-1)[i.to(result.device)].cpu()
    del result
    expected = $EXPECTED  # from the index i alone
    bad = wrong(actual, expected, DTYPE, ATOL, RTOL).nonzero().reshape(-1).tolist()
    for j in bad[:5]:
        want = f"in [{expected[0]}, {expected[1]})" if isinstance(expected, tuple) else repr(expected[j].item())
        print(f"    element {POSITIONS[j]}: {actual[j].item()!r} here, {want} expected")
    if bad:
        print(f"{len(bad)} of {len(POSITIONS)} elements read are wrong")
'''


def script(finding: Finding, torch_version: str) -> str | None:
    """The finding's standalone script; None for a stretched case's finding (the generic script applies)."""
    if finding.kind in ("crash", "hang"):
        return parts.died_in_steps(finding, torch_version, "the large oracle's own calls (a probe's large tensors; for large:rows the "
                                   "sample with one argument's dim 0 doubled or tiled, which a kernel that does not check its "
                                   "arguments' shapes can crash on)")
    if finding.kind != "large_size":
        return None  # a stretched case's finding is the judge's own: the generic script
    detail = decode_detail(Detail, finding)
    if detail is None:
        return parts.no_record(finding, torch_version, "the probe's tensor and positions")
    if detail.probe == "index":
        return _index(finding, detail, torch_version)
    if detail.probe == "creation":
        return _creation(finding, detail, torch_version)
    call = parts.writable_call(finding)
    if call is None:
        return None  # the generic script says why there is none
    m = finding.mismatch
    constants = elementwise.constants(atol=m.atol if m else 0.0, rtol=m.rtol if m else 0.0, slack=0.0, reference="in a short tensor")
    constants += [
        f"CALL = {parts.call_source(call)!r}",
        f"N = {detail.elements}  # elements of the large call",
        f"DISTINCT = {detail.distinct}  # values tiled",
        f"POSITIONS = {list(detail.positions)!r}  # the elements read",
    ]
    lines = parts.preamble(finding, call, torch_version, ("leaves", *elementwise.KIT), constants)
    lines += [*parts.function_lines(call), *parts.tensors_function(call), "", "", elementwise.source("disagree", "report").rstrip("\n")]
    lines += [_ELEMENTS.rstrip("\n"), *parts.verdict("wrong", "every element read gives what the same value gives in a short tensor")]
    return "\n".join(lines + parts.data_block(call) + parts.footer())


def _index(finding: Finding, detail: Detail, torch_version: str) -> str:
    """An index probe's script: the same tensor, positions and call; the formula as the reference."""
    form = index.FORMS[finding.opinfo]
    lines = parts.header(finding, None, torch_version)
    lines += [
        "import sys", "import traceback", "", "import torch", "",
        f"SUMMARY = {parts.one_line(finding.summary)!r}",
        f"CALL = {form.call!r}",
        f"DTYPE = torch.{finding.dtype}",
        f"DEVICE = {finding.device!r}",
        f"N = {detail.elements}  # elements of the big tensor",
        f"DISTINCT = {detail.distinct}  # element i holds i % DISTINCT",
        *([f"W = {index.W}  # the row length: the offset row * W wraps where the row index does not"] if "W" in form.call else []),
        f"WRITES = {form.writes!r}",
        f"AT = {list(detail.positions)!r}  # the positions indexed",
        f"SHADOWS = {list(detail.shadows)!r}  # one boundary away from them",
        "", "",
        inspect.getsource(index.tiled).rstrip("\n"),
        _INDEX.replace("$CALL", form.call).replace("$WRITTEN", form.written).replace("$READ", form.read).rstrip("\n"),
        *parts.verdict("wrong", "every element checked is right"),
    ]
    return "\n".join(lines + parts.footer())


def _creation(finding: Finding, detail: Detail, torch_version: str) -> str:
    """A creation probe's script: the same factory call and positions; the form's formula as the reference."""
    form = creation.FORMS[finding.opinfo]
    m = finding.mismatch
    lines = parts.header(finding, None, torch_version)
    lines += [
        "import sys", "import traceback", "", "import torch", "",
        f"SUMMARY = {parts.one_line(finding.summary)!r}",
        f"CALL = {form.call!r}",
        f"DTYPE = torch.{finding.dtype}",
        f"DEVICE = {finding.device!r}",
        f"N = {detail.elements}  # elements the call makes",
        f"K = {detail.size}  # an identity's or triangle's size",
        f"S = {int(detail.step) if detail.step.is_integer() else detail.step!r}  # arange's step",
        f"ATOL, RTOL = {m.atol if m else 0.0!r}, {m.rtol if m else 0.0!r}  # floating dtypes: the tolerance; others: exact",
        f"POSITIONS = {list(detail.positions)!r}  # the elements read",
        "", "",
        *(inspect.getsource(f).rstrip("\n") + "\n\n" for f in (creation.dirty, creation.triangle)),
        inspect.getsource(creation.wrong).rstrip("\n"),
        _CREATION.replace("$BEFORE", form.before or "None").replace("$CALL", form.call).replace("$EXPECTED", form.expected).rstrip("\n"),
        *parts.verdict("bad", "every element read holds what the formula gives"),
    ]
    return "\n".join(lines + parts.footer())
