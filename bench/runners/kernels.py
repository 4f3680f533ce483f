"""How much device work a case makes, and which phase of torchsleuth makes it: device ops and waits per case.

    python3 bench/run.py kernels --device cuda --seconds 60 --out DIR        # on the GPU machine
    python3 bench/run.py kernels --device cpu --seconds 20 --out DIR         # the same counts of host ops, to try it

Where workers share a GPU without MPS, their CUDA contexts take turns on it (bench/cuda-sweep.md, "Waiting for the
GPU"): a case costs the whole pool about as many turns as it hands the device separate pieces of work, and every
wait (a synchronize, a blocking copy, ``.item()``) ends a piece. ``runners/syncs.py`` counts the implicit waits by
line; this counts, over the same sample of the catalog (every --every-th op of the default selection, shuffled, as
``runners/sweep_profile.py`` plans them, run in this process by ``engine.run_unit``):

* the ATen ops that touch a tensor on the device (an input or an output there), through a ``TorchDispatchMode``
  around each unit, by op and by phase; views and metadata-only ops are counted apart (they launch no kernel);
* explicit ``synchronize`` calls (patched) and implicit waits (``torch.cuda.set_sync_debug_mode("warn")``), by phase.

A phase is the outermost torchsleuth function below ``engine`` on the stack; ops run by autograd's device thread
(a backward) have no torchsleuth frame and are counted as "autograd's thread". Written to DIR/kernels.md (printed)
and DIR/kernels.json, the record: device ops, views and waits per case, by phase.
"""

from __future__ import annotations

import collections
import os
import sys
import time

import _record
import syncs

SOURCE = os.sep + "torchsleuth" + os.sep
MARK = "synchronizing CUDA operation"
# ops that make or reinterpret a tensor's metadata and launch no kernel
NO_KERNEL = {"view", "_unsafe_view", "as_strided", "expand", "permute", "transpose", "t", "slice", "select", "unsqueeze",
             "squeeze", "detach", "alias", "empty", "empty_strided", "_reshape_alias", "unfold", "diagonal", "view_as_real",
             "view_as_complex", "_conj", "_neg_view", "lift_fresh", "set_", "resize_", "split", "unbind", "chunk",
             "split_with_sizes", "narrow", "reshape", "_local_scalar_dense", "is_same_size", "sym_size", "sym_stride",
             "sym_numel", "sym_storage_offset", "_has_compatible_shallow_copy_type", "record_stream"}


def phase() -> str:
    """The outermost torchsleuth function below engine on this thread's stack."""
    frame, outer = sys._getframe(2), None
    while frame is not None:
        name = frame.f_code.co_filename
        if SOURCE in name and not name.endswith(("engine.py", "kernels.py")):
            outer = f"{name.split(SOURCE, 1)[1]} {frame.f_code.co_name}"
        frame = frame.f_back
    return outer or "autograd's thread (a backward)"


def main() -> int:
    args = syncs.arguments(__doc__, 30)
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from torchsleuth import engine

    config, units = syncs.catalog_sample(args)
    device_type = torch.device(config.device).type
    counts = {k: collections.Counter() for k in ("ops", "views", "by_op", "explicit", "implicit")}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            leaves = tree_flatten((args, kwargs, out))[0]
            if any(isinstance(t, torch.Tensor) and t.device.type == device_type for t in leaves):
                name = func.__name__.split(".")[0]
                counts["views" if name in NO_KERNEL else "ops"][phase()] += 1
                if name not in NO_KERNEL:
                    counts["by_op"][name] += 1
            return out

    module = getattr(torch, device_type, None)
    if device_type != "cpu":
        original = module.synchronize

        def synchronize(*a, **k):
            counts["explicit"][phase()] += 1
            return original(*a, **k)

        module.synchronize = synchronize

    def show(message, category, filename, lineno, file=None, line=None):
        if MARK in str(message):
            counts["implicit"][phase()] += 1

    syncs.let_warnings_through(show)
    if device_type == "cuda":
        torch.cuda.set_sync_debug_mode("warn")
    cases, started, done, stopped = 0, time.perf_counter(), 0, ""
    os.makedirs(args.out, exist_ok=True)

    def write() -> None:
        per = max(cases, 1)
        totals = {k: sum(v.values()) / per for k, v in counts.items() if k != "by_op"}
        out = [f"# Device work per case on {args.device} ({time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__})", "",
               f"{cases:,} cases of {done} units in {time.perf_counter() - started:.0f} s. Per case: **{totals['ops']:.1f} device ops** "
               f"(and {totals['views']:.1f} views), **{totals['explicit']:.2f} explicit synchronizes, {totals['implicit']:.2f} implicit waits**."
               + (f" {stopped}" if stopped else ""), "",
               "| phase (the outermost torchsleuth function below engine) | device ops | views | synchronize | implicit waits |",
               "| --- | ---: | ---: | ---: | ---: |"]
        names = sorted(set().union(*(counts[k] for k in ("ops", "views", "explicit", "implicit"))), key=lambda n: -counts["ops"][n])
        out += [f"| {n} | {counts['ops'][n] / per:.2f} | {counts['views'][n] / per:.2f} | {counts['explicit'][n] / per:.2f} | "
                f"{counts['implicit'][n] / per:.2f} |" for n in names[:args.top]]
        out += ["", "| ATen op on the device | per case |", "| --- | ---: |"]
        out += [f"| {k} | {v / per:.2f} |" for k, v in counts["by_op"].most_common(args.top)]
        with open(os.path.join(args.out, "kernels.md"), "w") as f:
            f.write("\n".join(out) + "\n")

    for unit in units:
        if time.perf_counter() - started > args.seconds:
            break
        print(unit.key, file=sys.stderr, flush=True)
        try:
            with Count():
                for kind, payload in engine.run_unit(unit, config, frozenset()):
                    cases += kind == "outcome"
        except Exception as e:  # a lost device ends the count
            stopped = f"Stopped in {unit.key}: {type(e).__name__}: {str(e)[:200]}"
            break
        done += 1
        write()
    if device_type == "cuda":
        torch.cuda.set_sync_debug_mode(0)
    write()
    with open(os.path.join(args.out, "kernels.md")) as f:
        print(f.read())
    per = max(cases, 1)
    names = sorted(set().union(*(counts[k] for k in ("ops", "views", "explicit", "implicit"))), key=lambda n: -counts["ops"][n])
    _record.write(args.out, "kernels", device=args.device,
                  figures={"cases": cases, "units": done, **{f"{k} per case": round(sum(counts[k].values()) / per, 2)
                                                             for k in ("ops", "views", "explicit", "implicit")}},
                  table=_record.table(["phase", "device ops", "views", "synchronize", "implicit waits"],
                                      [[n, *(round(counts[k][n] / per, 2) for k in ("ops", "views", "explicit", "implicit"))]
                                       for n in names[:args.top]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
