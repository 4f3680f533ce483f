"""The H100 runs' open candidates (bench/time-target.md, bench/refusals-cost.md), checked in plain torch on CUDA.

    python3 bench/probes/cuda_candidates.py [--out DIR] [--only NAME]

Each check runs in a child process of its own with a time limit (a device-side assert ends a CUDA context, and one
check is of a hang), prints what CUDA gives against what the CPU gives, and says ``BUG PRESENT`` or ``ok``; the script
exits 1 when any bug is present. The checks:

* ``sort_bf16_nonfinite``: bfloat16 values with a negative NaN and both infinities sorted on CUDA against the CPU (the
  finding: NaN where the CPU and float64 put -inf), float16 and float32 beside it;
* ``cumsum_half``: float16 and bfloat16 scans along a long dim, their error against float64 in units of the output's
  rounding, CUDA against the CPU (the CPU accumulates in float32);
* ``cumsum_out_overlap``: ``cumsum(base[:8], 0, out=base[1:9])``, an out= that overlaps its input one element on (the
  CPU raises);
* ``floor_divide_zero``: an in-place int64 floor_divide by zero (the CPU raises ZeroDivisionError);
* ``embedding_bag_offsets``: an offset of 2^31 + 1 and of 2^32 + 1 (the CPU refuses both);
* ``nuc_nan``: the nuclear norm of a matrix holding NaN (the CPU's SVD raises ``_LinAlgError``);
* ``nuc_nan_backward``: the same, 255 columns, forward and backward, within 90 s (the catalog's case hung).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import _out

LIMIT = 90
PRESENT = 3  # a child's exit when its bug is present (1 is an uncaught error)


def sort_bf16_nonfinite(torch):
    # the shrunk case's input: NaN, inf, -inf, 0, -0, 1, -1 in turn, 125 of them, its NaN negative (bits 0xffff: a
    # float32 "default NaN", sign set, rounded to bfloat16); the first run of this check used a positive NaN and passed
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0] * 18)[:125]
    differ = 0
    for dtype, bits in ((torch.bfloat16, -1), (torch.float16, -1), (torch.float32, -1)):
        y = x.to(dtype)
        y.view({torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[dtype])[y.isnan()] = bits
        gpu, cpu = torch.sort(y.cuda()).values.cpu(), torch.sort(y).values
        n = int((~((gpu == cpu) | (gpu.isnan() & cpu.isnan()))).sum())
        print(f"  {str(dtype)[6:]}, negative NaN: CUDA first 3 {gpu[:3].tolist()}, CPU first 3 {cpu[:3].tolist()}; {n} positions differ")
        differ += n if dtype == torch.bfloat16 else 0
    return differ, f"bfloat16: {differ} of {x.numel()} sorted positions differ from the CPU"


def cumsum_half(torch):
    worst = 0.0
    for dtype in (torch.float16, torch.bfloat16):
        for shape, dim in (((4097,), 0), ((4097, 3), 0), ((3, 4097), 1), ((64, 1, 1), 0)):
            g = torch.Generator().manual_seed(1)
            x = torch.rand(shape, generator=g).to(dtype)
            exact = torch.cumsum(x.double(), dim)
            unit = torch.finfo(dtype).eps * torch.exp2(torch.frexp(exact.abs().clamp_min(1)).exponent - 1.0)
            errs = []
            for device in ("cuda", "cpu"):
                got = torch.cumsum(x.to(device), dim).cpu().double()
                errs.append(float(((got - exact).abs() / unit).max()))
            print(f"  {str(dtype)[6:]} {shape} dim {dim}: CUDA {errs[0]:.1f} units, CPU {errs[1]:.1f} units")
            worst = max(worst, errs[0] - max(errs[1], 1.0))
    return int(worst > 2), f"CUDA's worst error exceeds the CPU's by {worst:.1f} units of the output's rounding"


def cumsum_out_overlap(torch):
    try:
        torch.cumsum(torch.arange(1.0, 10.0)[:8], 0, out=torch.arange(1.0, 10.0)[1:9])
    except RuntimeError as e:
        print(f"  CPU: {str(e).splitlines()[0][:100]}")
    base = torch.arange(1.0, 10.0, device="cuda")
    try:
        torch.cumsum(base[:8], 0, out=base[1:9])
    except RuntimeError as e:
        return 0, f"CUDA raises too: {str(e).splitlines()[0][:100]}"
    torch.cuda.synchronize()
    expect = torch.cat([torch.tensor([1.0]), torch.cumsum(torch.arange(1.0, 9.0), 0)])
    wrong = int((base.cpu() != expect).sum())
    print(f"  CUDA wrote {base.tolist()}")
    return 1, f"CUDA returns without error; {wrong} of 9 values differ from the non-overlapping answer"


def floor_divide_zero(torch):
    try:
        torch.tensor([7, 8]).floor_divide_(torch.tensor([0, 0]))
    except (RuntimeError, ZeroDivisionError) as e:
        print(f"  CPU: {type(e).__name__}: {e}")
    x = torch.tensor([7, 8], device="cuda")
    try:
        x.floor_divide_(torch.tensor([0, 0], device="cuda"))
        torch.cuda.synchronize()
    except RuntimeError as e:
        return 0, f"CUDA raises too: {str(e).splitlines()[0][:100]}"
    return 1, f"CUDA returns without error: {x.tolist()}"


def embedding_bag_offsets(torch):
    w, i = torch.randn(5, 3), torch.tensor([0, 1, 2, 3])
    present, said = 0, []
    for off in (2**32 + 1, 2**31 + 1):  # 2^31 + 1 asserts on the device (2026-12-07, H100): the silent one first
        try:
            torch.nn.functional.embedding_bag(i, w, torch.tensor([0, off]))
            said.append(f"CPU accepts {off}")
        except (RuntimeError, IndexError, ValueError):
            pass
        try:
            got = torch.nn.functional.embedding_bag(i.cuda(), w.cuda(), torch.tensor([0, off], device="cuda"))
            torch.cuda.synchronize()
            present += 1
            said.append(f"offset {off}: CUDA returns {got.cpu().tolist()}")
        except RuntimeError as e:
            said.append(f"offset {off}: CUDA raises {str(e).splitlines()[0][:60]}")
            break  # a device-side assert leaves the context unusable
    return present, "; ".join(said)


def nuc_nan(torch):
    a = torch.full((4, 3), float("nan"))
    a[0, 0] = 1.0
    try:
        torch.linalg.matrix_norm(a, "nuc")
        print("  CPU returns")
    except RuntimeError as e:
        print(f"  CPU: {type(e).__name__}")
    try:
        got = torch.linalg.matrix_norm(a.cuda(), "nuc").item()
    except RuntimeError as e:
        return 0, f"CUDA raises too: {type(e).__name__}"
    return 1, f"CUDA returns {got}"


def nuc_nan_backward(torch):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(2, 5, 255, generator=g)
    a[..., 3] = float("nan")
    a = a.cuda().permute(0, 2, 1).contiguous().permute(0, 2, 1).requires_grad_()
    try:  # on the H100 of 2026-12-07 cusolver did not converge here and raised: loud (bench/refusals-cost.md)
        out = torch.linalg.matrix_norm(a, "nuc")
        torch.cuda.synchronize()
    except RuntimeError as e:
        return 0, f"the forward raises on CUDA: {type(e).__name__} (loud)"
    print("  forward returned")
    out.sum().backward()
    torch.cuda.synchronize()
    return 0, f"backward returned (NaN in grad: {bool(a.grad.isnan().any())})"


CHECKS = [sort_bf16_nonfinite, cumsum_half, cumsum_out_overlap, floor_divide_zero, embedding_bag_offsets, nuc_nan,
          nuc_nan_backward]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        import torch

        present, what = {c.__name__: c for c in CHECKS}[args.only](torch)
        print(f"  {what}")
        return PRESENT if present else 0
    present = False
    with _out.tee(args.out, "cuda_candidates.txt"):
        import torch

        print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA'}", flush=True)
        for check in CHECKS:
            print(f"{check.__name__}:", flush=True)
            try:
                rc = subprocess.run([sys.executable, __file__, "--only", check.__name__], timeout=LIMIT).returncode
            except subprocess.TimeoutExpired:
                print(f"  BUG PRESENT: no answer within {LIMIT} s (a hang)", flush=True)
                present = True
                continue
            print("  BUG PRESENT" if rc == PRESENT else "  ok" if rc == 0 else f"  the check failed (exit {rc})", flush=True)
            present |= rc == PRESENT
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())
