"""The repro script of an ``exact`` finding: the call at each wrong point, against the exact value it carries.

Design note. The exact values were computed by mpmath when the finding was
made; the script carries them as decimal strings (25 significant digits)
with the points as float.hex, so it needs only torch. For each point it
makes the call on one-element float64 tensors, prints the result, the exact
value and the error against what was allowed, the error taken in Python's
``decimal`` at 40 digits (a float64 result's error is below float64's own
resolution of the exact value). Exit status: 1 while a point is wrong, 0
once none is, 2 when the call raises.
"""

from __future__ import annotations

from ...judge.plugin import decode_detail
from ...judge.records import Finding
from ...scripts import parts
from ...scripts.snippet import number
from .detail import Detail

_MAIN = '''

def main():
    import decimal
    decimal.getcontext().prec = 40
    print("torchsleuth repro:", CALL, "in", DTYPE, "against its exact value (" + SOURCE + ", by mpmath, carried below)")
    wrong = 0
    for point, expected, allowed in zip(POINTS, EXPECTED, ALLOWED):
        xs = [float.fromhex(v) for v in point]
        try:
            got = float(FUNCTION(*[torch.tensor([x], dtype=getattr(torch, DTYPE)) for x in xs], *NUMBERS)[0])
        except Exception as e:
            print("the call raised:", type(e).__name__, e)
            sys.exit(2)
        exact = decimal.Decimal(expected)
        error = abs(decimal.Decimal(got) - exact) if math.isfinite(got) else decimal.Decimal("Infinity")
        bad = error > decimal.Decimal(allowed) if math.isfinite(float(exact)) or math.isfinite(got) else got != float(exact)
        wrong += bool(bad)
        print(("WRONG " if bad else "ok    ") + f"at {tuple(xs)!r}: got {got!r}, exact {expected}, error {float(error):.3g}, allowed {allowed:.3g}")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
'''


def script(finding: Finding, torch_version: str) -> str | None:
    detail = decode_detail(Detail, finding)
    if detail is None:
        return None
    head = "\n".join(parts.header(finding, None, torch_version))
    constants = "\n".join([
        f"CALL = {detail.call!r}",
        f"FUNCTION = {detail.call}" if detail.call.startswith("torch.") else f"FUNCTION = eval({detail.call!r})",
        f"NUMBERS = {tuple(detail.numbers)!r}",
        f"DTYPE = {detail.dtype!r}",
        f"SOURCE = {detail.source!r}",
        f"POINTS = {tuple(tuple(p) for p in detail.points)!r}",
        f"EXPECTED = {tuple(detail.expected)!r}",
        f"ALLOWED = {tuple(detail.allowed)!r}",
    ])
    return head + "\nimport math\nimport sys\n\nimport torch\n\n" + constants + "\n" + _MAIN


def snippet(finding: Finding) -> str | None:
    """The wrong points as a few lines of plain torch: the call on them, their exact values, one ``assert_close``
    within what the rule allowed (the exact values rounded to the dtype, which moves them by half a unit at most)."""
    import torch

    detail = decode_detail(Detail, finding)
    if detail is None or not detail.points or not detail.call.startswith("torch."):
        return None
    dtype = getattr(torch, detail.dtype)
    names = ("x", "y", "z", "u")[:len(detail.points[0])]
    if len(names) < len(detail.points[0]):
        return None
    lines = ["import torch"]
    for i, name in enumerate(names):
        values = ", ".join(number(float.fromhex(point[i]), dtype) for point in detail.points)
        lines.append(f"{name} = torch.tensor([{values}], dtype=torch.{detail.dtype})")
    numbers = "".join(f", {n!r}" for n in detail.numbers)
    lines.append(f"actual = {detail.call}({', '.join(names)}{numbers})")
    exact = ", ".join(f"float({e!r})" for e in detail.expected)
    lines.append(f"expected = torch.tensor([{exact}], dtype=torch.{detail.dtype})  # exact ({detail.source}, by mpmath)")
    lines.append(f"torch.testing.assert_close(actual, expected, atol={max(detail.allowed):.3g}, rtol=0, equal_nan=True)")
    return "\n".join(lines) + "\n"
