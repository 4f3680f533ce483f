"""Planted CUDA kernels (Triton) found by pointed runs with defaults: an index bound ignored, an index computed in float32.

    python3 bench/run.py cuda-plants --out DIR

Two kernels written in Triton replace aten's CUDA kernels through ``torch.library`` (the CUDA key), in a module every
worker imports (``--import``), and ``torchsleuth ops --ops OP --device cuda`` runs with its defaults:

* ``index_select`` without its bounds check: each index is wrapped into range (``idx % n``) where aten's kernel
  asserts. The CPU refuses those calls, so the refusal differential (shrink/refusals.py) replays them on the GPU, which
  returns: an ``unchecked_input`` finding is expected.
* ``flip`` (float32) computing the source position ``n - 1 - i`` in float32: exact up to 2^24 entries along the flipped
  dim, one entry off past it. A pointed run on CUDA runs the large oracle's span probes (a dim tiled to 2^23 + 3 and
  2^24 + 3, oracles/large/span.py), judged against the CPU: a finding on a ``dim:input@D>16777219`` case is expected.

Each run's findings that name the op are printed, with the run's wall time; the record (DIR/cuda-plants.json) holds
both, written again after each run (``complete``: false until the last), so a run stopped by ``--limit`` keeps what
ran. A run without the plants is the clean twin: the same command, no ``--import``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import _record

PLANT = '''
import warnings

import torch
import triton
import triton.language as tl


@triton.jit
def _gather_rows(src, idx, out, n, inner, picked, total, BLOCK: tl.constexpr):
    """out[o, j, k] = src[o, idx[j], k] with the bounds check left out: each index wrapped into range."""
    p = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = p < total
    k = p % inner
    j = (p // inner) % picked
    o = p // (inner * picked)
    i = tl.load(idx + j, mask=mask, other=0).to(tl.int64)
    i = ((i % n) + n) % n
    value = tl.load(src + (o * n + i) * inner + k, mask=mask)
    tl.store(out + p, value, mask=mask)


def unchecked_index_select(self, dim, index):
    if self.is_complex():  # Triton loads no complex numbers: the real and imaginary parts as a trailing dim
        x = self.reshape(1) if self.dim() == 0 else self
        out = torch.view_as_complex(unchecked_index_select(torch.view_as_real(x.contiguous()), dim % x.dim(), index))
        return out.reshape(()) if self.dim() == 0 and out.numel() == 1 else out
    x = self.contiguous().reshape(1) if self.dim() == 0 else self.contiguous()
    dim = dim % x.dim()
    n = x.shape[dim]
    index = index.reshape(-1).contiguous()
    shape = list(x.shape)
    shape[dim] = index.numel()
    out = x.new_empty(shape)
    inner = 1
    for d in x.shape[dim + 1:]:
        inner *= d
    if out.numel() == 0 or n == 0:
        return out.zero_() if n == 0 else out
    _gather_rows[(triton.cdiv(out.numel(), 1024),)](x, index, out, n, inner, index.numel(), out.numel(), BLOCK=1024)
    return out.reshape(()) if self.dim() == 0 and out.numel() == 1 else out


@triton.jit
def _flip_one(src, out, n, inner, total, BLOCK: tl.constexpr):
    """out[o, i, k] = src[o, n - 1 - i, k] with n - 1 - i computed in float32: the bug past 2^24 entries."""
    p = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = p < total
    k = p % inner
    i = (p // inner) % n
    o = p // (inner * n)
    source = ((n - 1) * 1.0 - i.to(tl.float32)).to(tl.int64)  # float32 index arithmetic
    value = tl.load(src + (o * n + source) * inner + k, mask=mask)
    tl.store(out + p, value, mask=mask)


def float32_index_flip(self, dims):
    out = self.contiguous()
    for dim in dims:
        dim = dim % max(out.dim(), 1)
        if out.dtype != torch.float32 or out.numel() == 0:
            index = torch.arange(out.shape[dim] - 1, -1, -1, device=out.device)
            out = torch.ops.aten.index.Tensor(out, [None] * dim + [index])  # aten's own: index_select is planted
            continue
        n = out.shape[dim]
        inner = 1
        for d in out.shape[dim + 1:]:
            inner *= d
        flipped = torch.empty_like(out)
        _flip_one[(triton.cdiv(out.numel(), 1024),)](out, flipped, n, inner, out.numel(), BLOCK=1024)
        out = flipped
    return out.clone() if out is self else out


_library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # replacing aten's CUDA kernels is the point
    _library.impl("index_select", unchecked_index_select, "CUDA")
    _library.impl("flip", float32_index_flip, "CUDA")
'''


def pointed(op: str, extra: list[str], tmp: str) -> dict:
    """``torchsleuth ops --ops OP --device cuda`` with defaults (and ``extra``): wall seconds and the findings naming it."""
    findings = os.path.join(tmp, "f.json")
    command = [sys.executable, "-m", "torchsleuth.cli.main", "ops", "--ops", op, "--device", "cuda", *extra,
               "--out", os.path.join(tmp, "out"), "--json", findings, "--no-progress"]
    start = time.perf_counter()
    ran = subprocess.run(command, capture_output=True, text=True)
    seconds = round(time.perf_counter() - start, 1)
    if ran.returncode not in (0, 1):
        return {"op": op, "seconds": seconds, "error": (ran.stderr or ran.stdout)[-2000:]}
    with open(findings) as f:
        document = json.load(f)
    kinds: dict[str, int] = {}
    for f in document["findings"]:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    return {"op": op, "seconds": seconds, "cases": document["cases"], "findings": len(document["findings"]), "kinds": kinds,
            "groups": [g["summary"] for g in document["groups"]][:12],
            "large": [f["case_id"] + ": " + f["summary"] for f in document["findings"] if ">1677" in f["case_id"] or ">838" in f["case_id"]][:4],
            "unchecked": [f["summary"] for f in document["findings"] if f["kind"] == "unchecked_input"][:4],
            "tail": ran.stdout[-1500:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="index_select,flip", help="the planted ops pointed at (default index_select,flip)")
    parser.add_argument("--clean", action="store_true", help="also run each op without the plants (the clean twin)")
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {len(os.sched_getaffinity(0))} CPUs\n", flush=True)
    record = {}
    with tempfile.TemporaryDirectory() as tmp:
        plant = os.path.join(tmp, "triton_plants.py")
        with open(plant, "w") as f:
            f.write(PLANT)
        for op in args.ops.split(","):
            runs = {"planted": ["--import", plant]} | ({"clean": []} if args.clean else {})
            for name, extra in runs.items():
                with tempfile.TemporaryDirectory() as run:
                    got = pointed(op, extra, run)
                record[f"{op} {name}"] = got
                print(f"## {op}, {name}: {got.get('seconds')} s, {got.get('cases')} cases, {got.get('findings')} findings {got.get('kinds')}")
                for line in got.get("unchecked", []) + got.get("large", []):
                    print(f"    {line[:400]}")
                for line in got.get("groups", []):
                    print(f"  group: {line[:300]}")
                if "error" in got:
                    print(got["error"])
                print(flush=True)
                _keep(args.out, record, complete=False)  # what ran so far, should --limit stop the next run
    _keep(args.out, record, complete=True)
    return 0


def _keep(out: str, record: dict, *, complete: bool) -> None:
    """The record of the runs so far (``complete``: all of them), and each run's detail beside it."""
    with open(os.path.join(out, "cuda-plants-detail.json"), "w") as f:
        json.dump(record, f, indent=1)
    rows = [[key, v.get("seconds"), v.get("cases", "-"), v.get("findings", "-"), len(v.get("unchecked", [])), len(v.get("large", []))]
            for key, v in record.items()]
    columns = ["run", "wall s", "cases", "findings", "unchecked_input", "past 2^23/2^24"]
    _record.write(out, "cuda-plants", device="cuda", table=_record.table(columns, rows),
                  figures={key: v.get("findings") for key, v in record.items()}, complete=complete)


if __name__ == "__main__":
    raise SystemExit(main())
