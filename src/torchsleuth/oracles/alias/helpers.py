"""The alias script's own helpers, as real code: ``script`` copies them into each script.

Design note. What an alias script runs beyond the repro kit (scripts.kit):
``check`` makes the call on unaliased copies and then aliased, and judges
the aliased one (``wrong_values``, ``writes_outside``). They are ordinary
functions, copied with ``inspect.getsource`` (``SOURCE`` lists them in the
order a script holds them); the kit's helpers they call are copied by the
kit (``KIT``). As in the kit, they read the script's own constants as
globals; the values below are only what plain use of this module sees, and
are never copied.
"""

from __future__ import annotations

import traceback

import torch

from ...run.call import CALL_SEED
from ...scripts.kit import copies, describe, storage_bytes, view_mask

# A script's own constants (the kit's convention): what plain use of these helpers sees.
ATOL, RTOL = 0.0, 0.0
SUMMARY = ALIASING = CALL = ""
WRITTEN: tuple[str, ...] = ()  # the tensors the call writes
SHARED: tuple[str, ...] = ()  # one tensor given for two outputs: (written, read)


def check(T, call):
    """The aliased call ``call(T)`` against the same call on unaliased copies: 1 while the bug is present,
    0 once it is gone (or the aliased call raises: refusing an aliasing is always right), 2 if unchecked."""
    R = copies(T)
    print("torchsleuth repro: an aliased call must raise or give the unaliased result")
    print("aliasing:", ALIASING)
    print("call:", CALL)
    describe(T)
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
    if wrong_values(T, R) + writes_outside(T, storages, before):
        print("BUG PRESENT:", SUMMARY)
        return 1
    print("OK: the aliased call gives the unaliased result and writes nothing else")
    return 0


def wrong_values(T, R):
    """How many written tensors differ from the unaliased call's (a shared one: the call must raise when the two results
    differ, and hold the result entirely when they are equal)."""
    wrong = 0
    for path in WRITTEN:
        if path in SHARED:
            continue
        bad = differ(T[path], R[path])
        if bad is None or bool(bad.any()):
            show_aliased(path, T[path], R[path], bad)
            wrong += 1
    if SHARED:
        tensor = T[SHARED[0]]
        verdicts = {path: differ(tensor, R[path]) for path in SHARED}
        apart = differ(R[SHARED[0]], R[SHARED[1]])
        if apart is None or bool(apart.any()):  # outputs sharing memory must raise when their results differ
            print(f"  one tensor was given for {SHARED[0]} and {SHARED[1]}, whose results differ, and the call returned "
                  "instead of raising: the tensor holds one result for both")
            wrong += 1
        elif all(bad is None or bool(bad.any()) for bad in verdicts.values()):
            print(f"  one tensor was given for {SHARED[0]} and {SHARED[1]}: it holds neither result entirely")
            for path, bad in verdicts.items():
                show_aliased(f"{path}'s result", tensor, R[path], bad)
            wrong += 1
    return wrong


def writes_outside(T, storages, before):
    """How many written storages changed outside the written views (``before``: their bytes before the call)."""
    wrong = 0
    for ptr, paths in storages.items():
        after = storage_bytes(T[paths[0]])
        if after.shape != before[ptr].shape:
            continue  # the storage was replaced (a resize): the values say what went wrong
        outside = (after != before[ptr]).any(-1) & ~covered(T, paths)
        if bool(outside.any()):
            where = outside.nonzero().reshape(-1)[:8].tolist()
            print(f"  {int(outside.sum())} element(s) of the storage of {', '.join(paths)} outside the written view(s) "
                  f"changed, at storage indices {where}")
            wrong += 1
    return wrong


def covered(T, paths):
    """Which elements of the paths' (one) storage their views cover."""
    numel = T[paths[0]].untyped_storage().nbytes() // T[paths[0]].element_size()
    mask = torch.zeros(numel, dtype=torch.bool)
    for path in paths:
        t = T[path]
        mask |= view_mask(numel, tuple(t.shape), t.stride(), t.storage_offset())
    return mask


def differ(actual, expected):
    """Elementwise: where actual is not expected within ATOL + RTOL * |expected| (NaN matches NaN); None: other shapes."""
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


def show_aliased(path, actual, expected, bad):
    """The count, and the first few elements that differ: wrong (aliased) and right (unaliased)."""
    if bad is None:
        print(f"  {path}: shape {list(actual.shape)}, but the unaliased call gives shape {list(expected.shape)}")
        return
    print(f"  {path}: {int(bad.sum())} of {actual.numel()} element(s) differ from the unaliased call")
    a, e = actual.detach().cpu().reshape(-1), expected.detach().cpu().reshape(-1)
    for i in bad.reshape(-1).nonzero().reshape(-1)[:6].tolist():
        index = [int(j) for j in torch.unravel_index(torch.tensor(i), actual.shape)] if actual.dim() else []
        print(f"    {path}{index}: aliased {a[i].item()!r}, unaliased {e[i].item()!r}")


# What a script holds: the kit's helpers these call (copied by the kit), then these, in this order.
KIT = ("copies", "storage_bytes", "view_mask", "load_imports")
SOURCE = (check, wrong_values, writes_outside, covered, differ, show_aliased)
