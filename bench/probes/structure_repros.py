"""The structured-input searches' findings on torch 2.13, checked in plain torch (bench/structure.md).

    python3 bench/probes/structure_repros.py [--out DIR]

Each check prints what torch gives against the exact value and says ``BUG PRESENT`` or ``ok``; the script exits 1
when any bug is present. Run on 2026-12-06 (this machine's CPU, torch 2.13.0+cpu).

* the derivative of ``linalg.det`` (and ``torch.det``) at a matrix whose determinant comes out exactly 0: forward
  mode and reverse mode give 0, where the derivative is the adjugate (nonzero at rank n - 1); and its double backward
  gives NaN at a matrix of rank n - 3, where every second derivative is 0;
* index reductions that accumulate one slot's writes in the tensor's own dtype: in bfloat16 a slot stalls at 256,
  in float16 at 2048 (``index_add`` of a 1-D tensor, ``index_put(accumulate=True)``, ``put_(accumulate=True)``, the
  backward of ``embedding``, ``index_reduce``'s mean); ``scatter_add`` and ``scatter_reduce`` accumulate in float32
  and are right.
"""

import argparse
import sys

import _out  # noqa: F401  (this checkout's torchsleuth, unused here; --out)


def det_derivatives(torch) -> list[tuple[str, float, float]]:
    import torch.autograd.forward_ad as fw

    a = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)  # det 0, rank 1; d det / d a[1, 1] = a[0, 0] = 1
    tangent = torch.tensor([[0.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    found = []
    for name, det in (("linalg.det", torch.linalg.det), ("det", torch.det)):
        with fw.dual_level():
            forward = fw.unpack_dual(det(fw.make_dual(a, tangent))).tangent.item()
        leaf = a.clone().requires_grad_()
        det(leaf).backward()
        found.append((f"{name} forward mode at [[1, 0], [0, 0]] along e11", forward, 1.0))
        found.append((f"{name} reverse mode at [[1, 0], [0, 0]], grad[1, 1]", leaf.grad[1, 1].item(), 1.0))
    # a 5x5 matrix of rank 2 (rows 2-5 equal): every second derivative of det is 0 there (rank below n - 2)
    b = torch.tensor([[1.0, 2, 2, 2, 2], [3, -1, -1, -1, -1], [3, -1, -1, -1, -1], [3, -1, -1, -1, -1], [3, -1, -1, -1, -1]])
    leaf = b.clone().requires_grad_()
    (g,) = torch.autograd.grad(torch.linalg.det(leaf), leaf, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), leaf)
    found.append(("linalg.det double backward at a 5x5 float32 matrix of rank 2, element [0, 0]", h[0, 0].item(), 0.0))
    return found


def accumulations(torch) -> list[tuple[str, float, float]]:
    found = []
    for dtype, k in ((torch.bfloat16, 384), (torch.float16, 3072)):
        name = str(dtype).removeprefix("torch.")
        ones, slot = torch.ones(k, dtype=dtype), torch.zeros(k, dtype=torch.long)
        found += [
            (f"index_add {name}, {k} writes into one slot", torch.zeros(3, dtype=dtype).index_add(0, slot, ones)[0].item(), k),
            (f"index_put accumulate {name}, {k} writes", torch.zeros(3, dtype=dtype).index_put((slot,), ones, accumulate=True)[0].item(), k),
            (f"put_ accumulate {name}, {k} writes", torch.zeros(3, dtype=dtype).put_(slot, ones, accumulate=True)[0].item(), k),
            (f"embedding backward {name}, {k} lookups of one row",
             torch.ops.aten.embedding_dense_backward(torch.ones(k, 4, dtype=dtype), slot, 3, -1, False)[0, 0].item(), k),
            (f"index_reduce mean {name}, {k} writes of 3",
             torch.zeros(3, dtype=dtype).index_reduce(0, slot, 3 * ones, "mean", include_self=False)[0].item(), 3),
            (f"scatter_add {name}, {k} writes (right)", torch.zeros(3, dtype=dtype).scatter_add(0, slot, ones)[0].item(), k),
            (f"index_add 2-D {name}, {k} rows into one (right)",
             torch.zeros(3, 2, dtype=dtype).index_add(0, slot, torch.ones(k, 2, dtype=dtype))[0, 0].item(), k),
        ]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", metavar="DIR", help="also write what it prints to DIR/structure.txt")
    args = parser.parse_args()
    import warnings

    import torch

    warnings.simplefilter("ignore")  # index_reduce is in beta
    present = 0
    with _out.tee(args.out, "structure.txt"):
        print(f"torch {torch.__version__}")
        for what, got, exact in det_derivatives(torch) + accumulations(torch):
            wrong = not abs(got - exact) <= 1e-6 * max(1.0, abs(exact))  # NaN is wrong
            present += wrong
            print(f"{'BUG PRESENT' if wrong else 'ok':11}  {what}: {got:g} (exact {exact:g})")
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())
