"""The refusal differential on a GPU: a planted CUDA kernel without its bounds check found, real ops pointed at, the cost.

    python3 bench/run.py refusals --device cuda --out DIR
    python3 bench/run.py refusals --device cuda --ops index_select,gather,take --out DIR

First a pointed run at ``index_select`` with a planted CUDA kernel (``torch.library``, the CUDA key: indices wrap where
aten's kernel asserts, an empty input gives zeros) imported: the run must report an ``unchecked_input`` finding. Then
each op of ``--ops`` pointed at with defaults, and again with ``--refusals 0``, one after the other on the same
machine: cases, wall seconds, the refusal note and the ``unchecked_input`` findings of each, which are what CUDA
returned where the CPU refuses the same values. Prints Markdown; the record (DIR/refusals.json) is the table.
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


def unchecked_index_select(self, dim, index):
    """index_select without its bounds check: indices wrap, an empty input gives zeros."""
    flat = self.reshape(1) if self.dim() == 0 else self
    n = flat.shape[dim]
    index = index.reshape(-1)
    if n == 0:
        shape = list(flat.shape)
        shape[dim] = index.numel()
        return flat.new_zeros(shape)
    return flat.movedim(dim, 0)[index.remainder(n)].movedim(0, dim)


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("index_select", unchecked_index_select, "CUDA")
'''

OPS = "index_select,gather,take,nn.functional.embedding,index_add,nn.functional.nll_loss,scatter,index_fill"


def pointed(op: str, device: str, extra: list[str], tmp: str) -> dict:
    """One ``torchsleuth ops --ops OP`` run: its cases, seconds, refusal note and unchecked_input findings."""
    findings = os.path.join(tmp, "f.json")
    command = [sys.executable, "-m", "torchsleuth.cli.main", "ops", "--ops", op, "--device", device, *extra,
               "--out", os.path.join(tmp, "out"), "--json", findings, "--no-progress"]
    start = time.perf_counter()
    ran = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if ran.returncode not in (0, 1):
        return {"op": op, "seconds": round(seconds, 1), "error": ran.stderr[-1500:]}
    with open(findings) as f:
        document = json.load(f)
    note = next((line.strip() for line in ran.stdout.splitlines() if "note (refusals)" in line), "")
    unchecked = [f["summary"] for f in document["findings"] if f["kind"] == "unchecked_input"]
    return {"op": op, "cases": document["cases"], "seconds": round(seconds, 1), "findings": len(document["findings"]),
            "unchecked": unchecked, "note": note}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--ops", default=OPS, help=f"the ops pointed at with and without the differential (default {OPS})")
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import torch

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"torch {torch.__version__}, {name}, {len(os.sched_getaffinity(0))} CPUs\n")
    rows, record = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        plant = os.path.join(tmp, "unchecked_cuda_plant.py")
        with open(plant, "w") as f:
            f.write(PLANT)
        with tempfile.TemporaryDirectory() as run:
            planted = pointed("index_select", args.device, ["--import", plant], run)
        print(f"planted index_select: {len(planted.get('unchecked', []))} unchecked_input findings; {planted.get('note', planted.get('error'))}")
        for summary in planted.get("unchecked", [])[:3]:
            print(f"    {summary}")
        record["planted"] = planted
        _keep(args, record, rows, complete=False)
    print("\n| op | cases | wall s (differential on) | wall s (--refusals 0) | unchecked_input | note |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for op in args.ops.split(","):
        with tempfile.TemporaryDirectory() as on, tempfile.TemporaryDirectory() as off:
            with_it = pointed(op, args.device, [], on)
            without = pointed(op, args.device, ["--refusals", "0"], off)
        record[op] = {"on": with_it, "off": without}
        row = [op, with_it.get("cases", "-"), with_it["seconds"], without["seconds"], len(with_it.get("unchecked", [])),
               with_it.get("note", with_it.get("error", ""))[:160]]
        rows.append(row)
        print("| " + " | ".join(str(c) for c in row) + " |", flush=True)
        for summary in with_it.get("unchecked", [])[:4]:
            print(f"    {summary}")
        _keep(args, record, rows, complete=False)  # what ran so far, should --limit stop the next op
    _keep(args, record, rows, complete=True)
    return 0


def _keep(args, record: dict, rows: list, *, complete: bool) -> None:
    """The record of the runs so far (``complete``: all of them), and each run's detail beside it."""
    with open(os.path.join(args.out, "refusals-detail.json"), "w") as f:
        json.dump(record, f, indent=1)
    _record.write(args.out, "refusals", device=args.device, table=_record.table(["op", "cases", "on s", "off s", "unchecked_input", "note"], rows),
                  figures={"planted_found": len(record["planted"].get("unchecked", []))}, complete=complete)


if __name__ == "__main__":
    raise SystemExit(main())
