"""How often a case waits for the GPU, and which line of torchsleuth makes it wait.

    python3 bench/run.py syncs --device cuda --seconds 60 --out DIR        # on the GPU machine

With 15 workers on one H200 the time a case spends waiting for the device grows 37-fold over one worker's
(``runners/contention.py``): the processes' CUDA contexts take turns on the GPU, so every synchronization waits for
the others' turns, and a case costs about as many turns as it synchronizes. This counts them: the units of a sample
of the catalog (every --every-th op of the default selection, shuffled, as ``runners/sweep_profile.py`` plans them)
run in this process with ``torch.cuda.set_sync_debug_mode("warn")``, and each synchronizing call (an explicit
``synchronize``, a blocking copy to or from the device, ``.item()``, ``nonzero``...) is counted by the innermost
torchsleuth line on the stack, and by the outermost torchsleuth function below ``engine`` (the phase). Warnings
are let through the sweep's own ``catch_warnings`` for this (the script replaces it), so it must run alone.
Written to DIR/syncs.md (printed too) and DIR/syncs.json, the record: synchronizations per case by phase.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
import time
import traceback
import warnings

import _record
from _sample import case_kind, catalog_config, op_sample, shuffled_units

MARK = "synchronizing CUDA operation"
SOURCE = os.sep + "torchsleuth" + os.sep


def arguments(doc: str, top: int):
    """The options this script and runners/kernels.py share, parsed."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--ops", metavar="SPEC")
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--top", type=int, default=top)
    parser.add_argument("--out", metavar="DIR", required=True)
    return parser.parse_args()


def catalog_sample(args):
    """The catalog config and its shuffled units, the oracles imported and the device's context made."""
    from torchsleuth import engine
    from torchsleuth.judge.plugin import BUILTIN

    config = catalog_config(args.device, op_sample(args.ops, args.every), workers=0, depth="catalog")
    for name in (*config.oracles, *config.sampled):
        BUILTIN.get(name)
    units = shuffled_units(config)
    engine.device_works(config.device)
    return config, units


def let_warnings_through(show) -> None:
    """Every warning to ``show``, the sweep's own filters and ``catch_warnings`` disabled (run alone)."""
    warnings.showwarning = show
    warnings.simplefilter("always")
    warnings.catch_warnings = lambda *a, **k: contextlib.nullcontext()  # the sweep's own filters would drop them
    warnings.simplefilter = lambda *a, **k: None


def main() -> int:
    args = arguments(__doc__, 40)
    import torch

    from torchsleuth import engine

    config, units = catalog_sample(args)
    lines: collections.Counter = collections.Counter()
    phases: collections.Counter = collections.Counter()

    def show(message, category, filename, lineno, file=None, line=None):
        if MARK not in str(message):
            return
        ours = [f for f in traceback.extract_stack()[:-1] if SOURCE in f.filename]
        if not ours:
            lines["(outside torchsleuth)"] += 1
            return
        inner = ours[-1]
        lines[f"{inner.filename.split(SOURCE, 1)[1]}:{inner.lineno} {inner.name}"] += 1
        below = [f for f in ours if not f.filename.endswith("engine.py")]
        phases[f"{below[0].filename.split(SOURCE, 1)[1]} {below[0].name}" if below else "engine"] += 1

    let_warnings_through(show)
    if config.device.startswith("cuda"):
        torch.cuda.set_sync_debug_mode("warn")
    cases, kinds, started, done = 0, collections.Counter(), time.perf_counter(), 0

    def write(stopped: str = "") -> None:  # after every unit: a kernel that kills the process leaves the counts so far
        total = sum(lines.values())
        out = [f"# Synchronizations per case on {args.device} ({time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__})", "",
               f"{cases:,} cases of {done} units in {time.perf_counter() - started:.0f} s: **{total / max(cases, 1):.2f} synchronizations "
               f"per case** ({total:,} in all).{' ' + stopped if stopped else ''}", "",
               "| where (the phase: the outermost torchsleuth function below engine) | per case |", "| --- | ---: |"]
        out += [f"| {k} | {v / max(cases, 1):.3f} |" for k, v in phases.most_common(args.top)]
        out += ["", "| line (the innermost torchsleuth frame) | per case |", "| --- | ---: |"]
        out += [f"| {k} | {v / max(cases, 1):.3f} |" for k, v in lines.most_common(args.top)]
        out += ["", "cases by kind: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common())]
        with open(os.path.join(args.out, "syncs.md"), "w") as f:
            f.write("\n".join(out) + "\n")

    os.makedirs(args.out, exist_ok=True)
    stopped = ""
    for unit in units:
        if time.perf_counter() - started > args.seconds:
            break
        print(unit.key, file=sys.stderr, flush=True)
        try:
            for kind, payload in engine.run_unit(unit, config, frozenset()):
                if kind == "outcome":
                    cases += 1
                    kinds[case_kind(payload.case)] += 1
        except Exception as e:  # a lost device ends the count
            stopped = f"Stopped in {unit.key}: {type(e).__name__}: {str(e)[:200]}"
            break
        done += 1
        write()
    if config.device.startswith("cuda"):
        torch.cuda.set_sync_debug_mode(0)
    write(stopped)
    with open(os.path.join(args.out, "syncs.md")) as f:
        print(f.read())
    per = max(cases, 1)
    _record.write(args.out, "syncs", device=args.device, figures={"cases": cases, "units": done,
                                                                   "synchronizations per case": round(sum(lines.values()) / per, 2)},
                  table=_record.table(["phase", "per case"], [[k, round(v / per, 3)] for k, v in phases.most_common(args.top)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
