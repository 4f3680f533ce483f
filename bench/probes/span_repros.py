"""The large oracle's span probes' finding on torch 2.13's CPU, checked in plain torch (bench/deep-large.md, "Spans").

    python3 bench/probes/span_repros.py [--out DIR]

``F.interpolate(x, size, mode="area")`` (``adaptive_avg_pool1d``/``2d``) averages each window in float32 one element
after another: over a window of 2.8 million elements (8,388,611 entries pooled to 3) the sum drifts, and the four
values 1.7, 3.1, 2.2, 3.0 tiled along the dim average to 2.4541 where float64 gives 2.5 and ``Tensor.mean`` over the
same window in float32 gives 2.4999998 (1.8% off, 700 000 times float32's rounding). The script prints what torch
gives against float64 and ``mean()`` and says ``BUG PRESENT`` or ``ok``; it exits 1 when the bug is present. Run on
2026-12-07 (this machine's CPU, torch 2.13.0+cpu).
"""

import argparse
import sys

import _out  # noqa: F401  (this checkout's torchsleuth, unused here; --out)


def area_over_a_span(torch, length: int = (1 << 23) + 3) -> tuple[float, float, float]:
    x = torch.tensor([1.7, 3.1, 2.2, 3.0]).repeat(length // 4 + 1)[:length].reshape(1, 1, length)
    pooled = torch.nn.functional.interpolate(x, 3, mode="area")[0, 0, 0].item()
    exact = torch.nn.functional.interpolate(x.double(), 3, mode="area")[0, 0, 0].item()
    window = x.flatten()[: -(-length // 3)]  # the first of the three windows
    return pooled, exact, window.mean().item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="also keep the output in OUT/span_repros.txt")
    args = parser.parse_args()
    import torch

    with _out.tee(args.out, "span_repros.txt"):
        pooled, exact, mean = area_over_a_span(torch)
        wrong = abs(pooled - exact) > 1e-3 * abs(exact)
        print(f"torch {torch.__version__}")
        print(f"interpolate(mode='area') over 8388611 entries, float32: {pooled:.7g}; float64: {exact:.7g}; "
              f"float32 mean() of the window: {mean:.7g}: {'BUG PRESENT' if wrong else 'ok'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
