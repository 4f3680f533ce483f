"""The pointed runs' findings at index_reduce, linalg.lu and linalg.matrix_rank on torch 2.13, checked in plain torch
(bench/linalg-index.md).

    python3 bench/probes/linalg_index_repros.py [--out DIR]

Each check prints what torch gives against what it should and says ``BUG PRESENT`` or ``ok``; the script exits 1
when any bug is present. Run on 2026-12-07 (this machine's CPU, torch 2.13.0+cpu).

* ``index_reduce``'s mean backward divides each write's gradient by the slot's count accumulated in the tensor's own
  dtype: past 256 writes in bfloat16 (2048 in float16) the count stalls and every gradient is 1.5 times too large
  at 384 (3072) writes (the forward's stall is bench/structure.md's);
* ``embedding_bag``'s backward (mode ``sum``) adds the gradients of one row's lookups in the tensor's dtype: 384
  lookups of one row in bfloat16 give 256, 3072 in float16 give 2048 (its forward accumulates in float32 and is
  right; ``embedding``'s backward stalls alike, bench/structure.md);
* ``linalg.lu(A, out=(P, L, U))`` with an ``L`` whose batch dims are strided writes past the view into its storage
  and leaves elements of the view unwritten (with permuted outs, the pointed run's workers died of SIGSEGV and
  SIGABRT, which this script does not provoke); the same tensor passed as ``P`` and ``L`` is accepted silently;
* ``linalg.lstsq(A, B, driver="gelsd", out=...)`` with one tensor for ``residuals`` and ``singular_values`` is
  accepted silently, the residuals (empty at a rank-deficient A) then holding the singular values;
* ``linalg.matrix_rank(A, atol=t, out=out)`` with a tolerance tensor that broadcasts past ``A``'s batch shape
  restrides a correctly sized non-contiguous ``out`` and, for a strided one, writes into the gaps between its
  elements.
"""

import argparse
import sys

import _out  # noqa: F401  (this checkout's torchsleuth, unused here; --out)


def index_reduce_mean_backward(torch) -> list[tuple[str, float, float]]:
    found = []
    for dtype, k in ((torch.bfloat16, 384), (torch.float16, 3072)):
        source = torch.ones(k, dtype=dtype, requires_grad=True)
        out = torch.zeros(3, dtype=dtype).index_reduce(0, torch.zeros(k, dtype=torch.long), source, "mean", include_self=False)
        out.backward(torch.ones(3, dtype=dtype))
        found.append((f"index_reduce mean backward {str(dtype)[6:]}, {k} writes into one slot: a write's gradient",
                      source.grad[0].item(), 1 / k))
    return found


def embedding_bag_backward(torch) -> list[tuple[str, float, float]]:
    found = []
    for dtype, k in ((torch.bfloat16, 384), (torch.float16, 3072)):
        weight = torch.zeros(3, 4, dtype=dtype, requires_grad=True)
        out = torch.nn.functional.embedding_bag(torch.zeros(k, dtype=torch.long), weight, torch.tensor([0]), mode="sum")
        out.backward(torch.ones_like(out))
        found.append((f"embedding_bag backward {str(dtype)[6:]}, {k} lookups of one row", weight.grad[0, 0].item(), k))
    return found


def lu_out(torch) -> list[tuple[str, float, float]]:
    a = torch.randn(2, 2, 1, 1, generator=torch.Generator().manual_seed(0))
    storage = torch.full((16,), float("nan"))
    lower = storage.as_strided((2, 2, 1, 1), (8, 2, 1, 1))
    torch.linalg.lu(a, out=(torch.empty(2, 2, 1, 1), lower, torch.empty(2, 2, 1, 1)))
    outside = sum(1 for i in range(16) if i not in (0, 2, 8, 10) and not storage[i].isnan())
    b = torch.randn(2, 2, 2, 2, generator=torch.Generator().manual_seed(1))
    lower = torch.full((256,), float("nan")).as_strided((2, 2, 2, 2), (128, 32, 8, 2))
    torch.linalg.lu(b, out=(torch.empty(2, 2, 2, 2), lower, torch.empty(2, 2, 2, 2)))
    wrong = int((~torch.isclose(lower, torch.linalg.lu(b).L)).sum())
    shared = torch.empty(3, 3)
    try:
        torch.linalg.lu(torch.randn(3, 3), out=(shared, shared, torch.empty(3, 3)))
        accepted = 1.0
    except RuntimeError:
        accepted = 0.0
    return [("linalg.lu out= with L strided in its batch dims (2, 2, 1, 1): storage elements written outside the view", outside, 0),
            ("linalg.lu out= with L strided (2, 2, 2, 2): elements of the view left unwritten or wrong", wrong, 0),
            ("linalg.lu out= with one tensor for P and L: accepted (1) instead of raising (0)", accepted, 0)]


def lstsq_shared_out(torch) -> list[tuple[str, float, float]]:
    shared = torch.empty(0)
    try:
        torch.linalg.lstsq(torch.ones(4, 2), torch.zeros(4, 1), driver="gelsd",
                           out=(torch.empty(0), shared, torch.empty(0, dtype=torch.int64), shared))
        accepted = 1.0
    except RuntimeError:
        accepted = 0.0
    return [("linalg.lstsq out= with one tensor for residuals and singular_values: accepted (1) instead of raising (0)", accepted, 0)]


def matrix_rank_out(torch) -> list[tuple[str, float, float]]:
    a, tol = torch.randn(3, 3, generator=torch.Generator().manual_seed(2)), torch.zeros(2, 2)
    out = torch.zeros(2, 2, dtype=torch.int64).t()
    torch.linalg.matrix_rank(a, atol=tol, out=out)
    restrided = float(out.stride() != (1, 2))
    base = torch.full((2, 4), -7, dtype=torch.int64)
    torch.linalg.matrix_rank(a, atol=tol, out=base[:, ::2])
    gaps = int((base[:, 1::2] != -7).sum())
    return [("linalg.matrix_rank(atol=tensor (2, 2), out=transposed (2, 2)): out restrided (1) or kept (0)", restrided, 0),
            ("linalg.matrix_rank(atol=tensor (2, 2), out=strided (2, 2)): elements written into the gaps", gaps, 0)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", metavar="DIR", help="also write what it prints to DIR/linalg_index.txt")
    args = parser.parse_args()
    import warnings

    import torch

    warnings.simplefilter("ignore")  # index_reduce is in beta; out= resized
    present = 0
    with _out.tee(args.out, "linalg_index.txt"):
        print(f"torch {torch.__version__}")
        checks = (index_reduce_mean_backward(torch) + embedding_bag_backward(torch) + lu_out(torch) + lstsq_shared_out(torch)
                  + matrix_rank_out(torch))
        for what, got, exact in checks:
            wrong = not abs(got - exact) <= 1e-6 * max(1.0, abs(exact))
            present += wrong
            print(f"{'BUG PRESENT' if wrong else 'ok':11}  {what}: {got:g} (exact {exact:g})")
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())
