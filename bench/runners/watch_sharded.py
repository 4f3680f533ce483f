"""What watching a sharded run costs: a tensor-parallel MLP on 2 gloo ranks unwatched, invariants only, shadow replay.

    python3 bench/run.py watch-sharded [--steps 20] [--width 256] [--repeats 3] [--nproc 2] --out DIR

The loop (bench/runners/_sharded_loop.py): Linear(W, 4W), GELU, Linear(4W, W) parallelised Colwise then Rowwise,
Adam, batch 64, one thread a rank, each step timed between barriers on rank 0. Each setting is a launch of its own:
``torchrun`` (unwatched), ``torchsleuth watch --nproc N --invariants-only`` and ``torchsleuth watch --nproc N``
(the shadow replay, each distinct call once: plain and DTensor calls). The figures are medians over the
repeats of the first step (where the shadow replay judges each distinct call: its gathers and plain ops) and of
the steady step (the median of the steps after the first two), and the ratio to the unwatched launch's; process
starts are not in them. Then the real DTensor bug of torch 2.13 a training loop meets (_partial_item_loop.py:
``.item()`` of an FSDP2 parameter's Partial sum of squares reads each rank's own share) is watched, and what watch
found is kept. The record (DIR/watch-sharded.json) is the table and those findings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import _record

LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sharded_loop.py")
BUG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_partial_item_loop.py")
SETTINGS = {
    "unwatched (torchrun)": None,
    "invariants only": ["--invariants-only"],
    "shadow replay (default)": [],
}


def environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([os.path.join(_record.ROOT, "src"), os.environ.get("PYTHONPATH", "")])}


def found_in_loop(nproc: int, out: str) -> list[dict]:
    """``torchsleuth watch --nproc N`` of the loop that meets torch 2.13's Partial ``.item()`` bug: its findings."""
    findings = os.path.join(out, "bug", "findings.json")
    subprocess.run([sys.executable, "-m", "torchsleuth", "watch", "--nproc", str(nproc), "--out", os.path.join(out, "bug"), "--json", findings,
                    BUG], capture_output=True, text=True, env=environment(), timeout=1800)
    with open(findings) as f:
        return [{"op": x["op"], "kind": x["kind"], "summary": x["summary"]} for x in json.load(f)["findings"]]


def launch(options, nproc: int, steps: int, width: int, out: str) -> list[float]:
    env = environment()
    if options is None:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), LOOP, str(steps), str(width)]
    else:
        command = [sys.executable, "-m", "torchsleuth", "watch", "--nproc", str(nproc), "--out", os.path.join(out, "watch"), *options,
                   LOOP, str(steps), str(width)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    line = next((x for x in done.stdout.splitlines() if x.startswith("STEP-SECONDS ")), None)
    if line is None:
        raise SystemExit(f"{' '.join(command)} printed no step times:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(line.split(" ", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import torch

    first = {name: [] for name in SETTINGS}
    steady = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):
        for name, options in SETTINGS.items():  # interleaved, so drift hits every setting alike
            seconds = launch(options, args.nproc, args.steps, args.width, args.out)
            first[name].append(seconds[0])
            steady[name].append(statistics.median(seconds[2:]))
    base_first, base_steady = statistics.median(first["unwatched (torchrun)"]), statistics.median(steady["unwatched (torchrun)"])
    rows = []
    for name in SETTINGS:
        f, s = statistics.median(first[name]), statistics.median(steady[name])
        rows.append([name, round(f * 1000, 1), f"{f / base_first:.2f}x", round(s * 1000, 2), f"{s / base_steady:.2f}x"])
    columns = ["setting", "first step ms", "ratio", "steady step ms", "ratio"]
    print(f"torch {torch.__version__}, {args.nproc} gloo ranks, width {args.width}, {args.steps} steps, median of {args.repeats}")
    print("| " + " | ".join(columns) + " |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        print("| " + " | ".join(map(str, row)) + " |")
    found = found_in_loop(args.nproc, args.out)
    for finding in found:
        print(f"found in {os.path.basename(BUG)}: {finding['op']} ({finding['kind']}): {finding['summary']}")
    _record.write(args.out, "watch-sharded", table=_record.table(columns, rows),
                  figures={"steps": args.steps, "width": args.width, "repeats": args.repeats, "nproc": args.nproc}, found=found)


if __name__ == "__main__":
    main()
