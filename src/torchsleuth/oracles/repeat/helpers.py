"""The repeat script's own helpers, as real code: ``script`` copies them into each script.

Design note. What a repeat script runs beyond the repro kit (scripts.kit):
``check_number`` or ``check_dtype`` makes A, B and A again on the same
tensors (``once``) and judges them as the oracle did (``again``, then B
against its reference or the meta device). They are ordinary functions,
copied with ``inspect.getsource`` (``SOURCE`` lists them in the order a
script holds them); the kit's helpers they call are copied by the kit
(``KIT``). As in the kit, they read the script's own constants as globals;
the values below are only what plain use of this module sees, and are never
copied.
"""

from __future__ import annotations

import torch

from ...run.call import CALL_SEED
from ...scripts.kit import compare, describe, fmt, leaves, same_bits

# A script's own constants (the kit's convention): what plain use of these helpers sees.
SUMMARY = CHANGE = CALL_A = CALL_B = ""
CASE_DTYPE = CASE_DEVICE = OTHER_DTYPE = ""
NUDGED = B_REFERENCE = REFERENCE_DTYPE = ""
UNIT_ROUNDOFF = ATOL = RTOL = SLACK = 0.0
WRITTEN: tuple[str, ...] = ()


def fresh_copies(T, dtype="", nudge=None, device="cpu"):
    """Contiguous copies on ``device`` in fresh storages, the case's dtype turned into ``dtype``, floats nudged by ``nudge``'s seed."""
    found = {}
    generator = torch.Generator().manual_seed(nudge) if nudge is not None else None
    for path, t in T.items():
        c = t.detach().to(device)
        if dtype and c.dtype == getattr(torch, CASE_DTYPE):
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


def again(T, call_a, first, second):
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


def check_number(T, call_a, call_b, reference_b):
    """A, B with the number changed, A again; 1 while either check fails, else 0."""
    print("torchsleuth repro: A, then B with", CHANGE, "then A again, on the same tensors")
    print("A:", CALL_A)
    print("B:", CALL_B)
    describe(T)
    first = once(call_a, T)
    b = once(call_b, T)
    second = once(call_a, T)
    bug = again(T, call_a, first, second)
    if not B_REFERENCE:
        print("2. no reference that a cache cannot share: B not judged")
    else:
        print(f"2. B against its reference ({B_REFERENCE})")
        nudged = B_REFERENCE == NUDGED
        expected = once(reference_b, fresh_copies(T, REFERENCE_DTYPE, nudge=1 if nudged else None))
        others = [once(reference_b, fresh_copies(T, REFERENCE_DTYPE, nudge=seed)) for seed in (2, 3, 4)] if nudged else [expected]
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


def check_dtype(T, call_a, call_b, call_meta):
    """A, B in another dtype, A again; 1 while either check fails, else 0."""
    print("torchsleuth repro: A, then B in another dtype, then A again")
    print("A:", CALL_A, "on T")
    print("B:", CALL_B, f"on copies of T, every {CASE_DTYPE} tensor in {OTHER_DTYPE}")
    describe(T)
    first = once(call_a, T)
    b = once(call_b, fresh_copies(T, OTHER_DTYPE, device=CASE_DEVICE))
    second = once(call_a, T)
    bug = again(T, call_a, first, second)
    print("2. B's dtypes against the same call on the meta device (no kernel cache serves it)")
    try:
        expected = dict(leaves(call_meta(fresh_copies(T, OTHER_DTYPE, device="meta"))))
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


# What a script holds: the kit's helpers these call (copied by the kit), then these, in this order.
KIT = ("leaves", "compare", "same_bits", "fmt")
NUMBER_SOURCE = (fresh_copies, once, again, far, check_number)
DTYPE_SOURCE = (fresh_copies, once, again, check_dtype)
