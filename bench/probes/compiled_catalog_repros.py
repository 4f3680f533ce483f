"""The compiled variant's findings in the catalog (``torchsleuth ops --compile``), each checked in plain torch.

    python3 bench/probes/compiled_catalog_repros.py [--out DIR]

Each check runs a call eagerly and through ``torch.compile(backend="inductor", fullgraph=True)`` on the values the
catalog's shrunk finding has (bench/compiled-variant.md, "The catalog with --compile"), prints both and says
``BUG PRESENT`` or ``ok``; the script exits 1 when any is present. Run on 2026-12-07 on this machine's CPU
(torch 2.13.0+cpu).
"""

import argparse
import math
import sys

import _out  # noqa: F401  (this checkout's torchsleuth, unused here; --out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="also keep the output in OUT/compiled_catalog_repros.txt")
    args = parser.parse_args()
    import warnings

    import torch

    warnings.simplefilter("ignore")

    def compiled(function, backend="inductor", dynamic=None):
        torch._dynamo.reset()
        return torch.compile(function, backend=backend, fullgraph=True, dynamic=dynamic)

    def same(a, b):
        a, b = torch.as_tensor(a), torch.as_tensor(b)
        return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan()) if a.is_floating_point() or a.is_complex() else a == b).all())

    present = []

    def report(name, eager, got, words=("eager", "compiled")):
        wrong = not same(eager, got)
        present.append(wrong)
        print(f"{name}: {words[0]} {eager.tolist() if isinstance(eager, torch.Tensor) else eager}, "
              f"{words[1]} {got.tolist() if isinstance(got, torch.Tensor) else got}: {'BUG PRESENT' if wrong else 'ok'}")

    with _out.tee(args.out, "compiled_catalog_repros.txt"):
        print(f"torch {torch.__version__}")
        x = torch.randn(3, 3, generator=torch.Generator().manual_seed(0))
        for backend in ("aot_eager", "inductor"):  # out= of a composite op: the write is lost under AOTAutograd
            out = torch.full((), 77, dtype=torch.long)
            compiled(lambda x, out: torch.linalg.matrix_rank(x, out=out), backend)(x, out)
            report(f"linalg.matrix_rank(x, out=out) [{backend}], out before the call 77", torch.linalg.matrix_rank(x), out)
        v = torch.tensor([1.0, -2.0, 0.5, 3.0])
        for backend in ("eager", "inductor"):  # lost even by dynamo's own backend
            out = torch.full((3,), complex(7, 7), dtype=torch.complex64)
            compiled(lambda v, out: torch.fft.ihfftn(v, out=out), backend)(v, out)
            report(f"fft.ihfftn(v, out=out) [{backend}], out before the call 7+7j", torch.fft.ihfftn(v), out)
        empty = torch.empty(0)
        report("var_mean(empty)[1] (the mean)", torch.var_mean(empty)[1], compiled(torch.var_mean)(empty)[1])
        report("std_mean(empty, unbiased=False)[1]", torch.std_mean(empty, False)[1], compiled(lambda t: torch.std_mean(t, False))(empty)[1])
        tiny, two = torch.tensor([1.401298464324817e-45]), torch.tensor([-2.0])  # the quotient is a tiny negative: its floor is -1
        report("floor_divide(1.4e-45, -2.0) float32", torch.floor_divide(tiny, two), compiled(torch.floor_divide)(tiny, two))
        report("div(1.4e-45, -2.0, rounding_mode='floor')", torch.div(tiny, two, rounding_mode="floor"),
               compiled(lambda a, b: torch.div(a, b, rounding_mode="floor"))(tiny, two))
        # 1.0 is an exact multiple of 2^-1074: both are 0. Eager's scalar loop (5 elements) says so; its vectorized body
        # (16 elements) and inductor divide first, and 1.0 / 5e-324 overflows
        least = torch.tensor([5e-324], dtype=torch.float64)
        for n in (5, 16):
            ones = torch.ones(n, dtype=torch.float64)
            report(f"fmod(1.0, 5e-324) float64 over {n} elements", torch.fmod(ones, least), compiled(torch.fmod)(ones, least))
            report(f"remainder(1.0, 5e-324) float64 over {n} elements", torch.remainder(ones, least), compiled(torch.remainder)(ones, least))
        report("fmod(1.0, 5e-324) float64 over 16 elements, eagerly", torch.zeros(16, dtype=torch.float64),
               torch.fmod(torch.ones(16, dtype=torch.float64), least), words=("exact", "eager"))
        nan = torch.tensor([math.nan])
        report("softshrink(nan)", torch.nn.functional.softshrink(nan), compiled(torch.nn.functional.softshrink)(nan))
        window = torch.tensor([[[[math.nan, math.inf], [-1.0, math.nan]]]])  # two NaNs in one window: which one's index
        pool = lambda t: torch.nn.functional.max_pool2d(t, 3, stride=2, ceil_mode=True, return_indices=True)[1]  # noqa: E731
        report("max_pool2d(...return_indices=True) indices, a window with two NaNs", pool(window), compiled(pool)(window))
        storage = torch.zeros(16, dtype=torch.long)
        storage[3:12] = torch.tensor([-8, 6, 9, 0, 0, 5, 5, 7, 6])
        view, src = storage[3:12].view(3, 3), torch.tensor([[5, 1], [-5, 2]])
        scatter = lambda a, b: torch.as_strided_scatter(a, b, (2, 2), (1, 2), storage_offset=1)  # noqa: E731
        report("as_strided_scatter on a view at storage offset 3 (dynamic shapes)", scatter(view, src), compiled(scatter, dynamic=True)(view, src))
    return 1 if any(present) else 0


if __name__ == "__main__":
    sys.exit(main())
