"""The autodiff oracle's findings at the thresholds search's sets on torch 2.13, checked in plain torch (bench/thresholds.md).

    python3 bench/probes/gradient_threshold_repros.py [--out DIR]

Each check prints what torch gives against the exact value (mpmath) and says ``BUG PRESENT`` or ``ok``; the script
exits 1 when any bug is present. Run on 2026-12-07 (this machine's CPU, torch 2.13.0+cpu).

* ``special.erfcx``'s derivatives for large x: its backward is ``2 x erfcx(x) - 2/sqrt(pi)``, which cancels (erfcx(x)
  is about 1/(x sqrt(pi))), so float64 gives erfcx'(1e8) = 0 (exact -5.6e-17) and erfcx''(1e4) = 3.8e-12, 3.4 times
  the exact 1.13e-12; at 1e8 and beyond the second derivative is off by sixteen orders of magnitude;
* ``logit`` with ``eps``: below ``eps`` the input is clamped and every derivative is 0, but the double backward gives
  NaN where ``x * (1 - x)`` squared underflows (float64 x = 1e-200; float32 x = 1e-30).
"""

import argparse
import sys

import _out  # noqa: F401  (this checkout's torchsleuth, unused here; --out)


def erfcx_derivatives(torch, mp) -> list[tuple[str, float, float]]:
    found = []
    f = lambda x: mp.exp(x * x) * mp.erfc(x)  # noqa: E731
    for x0 in (1e4, 1e8):
        x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(torch.special.erfcx(x), x, create_graph=True)
        (h,) = torch.autograd.grad(g, x)
        with mp.workprec(300):
            exact = [float(mp.diff(f, mp.mpf(x0), n)) for n in (1, 2)]
        found.append((f"special.erfcx float64 first derivative at {x0:g}", g.item(), exact[0]))
        found.append((f"special.erfcx float64 second derivative at {x0:g}", h.item(), exact[1]))
    return found


def logit_double_backward(torch) -> list[tuple[str, float, float]]:
    found = []
    for dtype, x0 in ((torch.float64, 1e-200), (torch.float32, 1e-30)):
        x = torch.tensor(x0, dtype=dtype, requires_grad=True)
        (g,) = torch.autograd.grad(torch.logit(x, eps=0.2), x, create_graph=True)
        (h,) = torch.autograd.grad(g, x)
        found.append((f"logit(eps=0.2) {str(dtype).removeprefix('torch.')} second derivative at {x0:g}", h.item(), 0.0))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", metavar="DIR", help="also write what it prints to DIR/gradient_thresholds.txt")
    args = parser.parse_args()
    import mpmath as mp
    import torch

    present = 0
    with _out.tee(args.out, "gradient_thresholds.txt"):
        print(f"torch {torch.__version__}")
        for what, got, exact in erfcx_derivatives(torch, mp) + logit_double_backward(torch):
            wrong = not abs(got - exact) <= 1e-6 * abs(exact) + 1e-300  # NaN is wrong
            present += wrong
            print(f"{'BUG PRESENT' if wrong else 'ok':11}  {what}: {got:g} (exact {exact:g})")
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())
