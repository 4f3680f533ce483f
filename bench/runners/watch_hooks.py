"""What a watched step costs when its invariants are not checked: the hooks alone, on the loop of watch_cuda.py.

    python3 bench/run.py watch-hooks --device cuda [--steps 300] [--repeats 5] --out DIR

Four settings interleaved, each ``--steps`` steps after 20 untimed ones, the median of ``--repeats``: the loop
unwatched; with a global optimizer pre- and post-step hook that do nothing; under ``watch(invariants_only=True)``
with its cadence told never to check after the first step; and under ``watch(invariants_only=True)`` as it is.
Prints milliseconds per step and the ratio to the unwatched loop; the record (DIR/watch-hooks.json) is that table.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _record
from watch_cuda import mlp  # the same loop as its overhead part


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import torch
    from torch.optim import optimizer as optim_module

    from torchsleuth import watch
    from torchsleuth.watch.cadence import Cadence

    device = args.device
    model, optimizer, data, target = mlp(device)

    def steps(n: int) -> float:
        for _ in range(20):
            one()
        sync()
        start = time.perf_counter()
        for _ in range(n):
            one()
        sync()
        return (time.perf_counter() - start) / n * 1e3

    def one():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        optimizer.step()

    def sync():
        torch.cuda.synchronize() if device.startswith("cuda") else None

    def unwatched():
        return steps(args.steps)

    def empty_hooks():
        handles = [optim_module.register_optimizer_step_pre_hook(lambda *a: None),
                   optim_module.register_optimizer_step_post_hook(lambda *a: None)]
        try:
            return steps(args.steps)
        finally:
            for h in handles:
                h.remove()

    def never_checked():
        done = Cadence.done
        Cadence.done = lambda self: setattr(self, "_next", 10**9)  # after the first step, no step is due
        try:
            with watch(invariants_only=True, device=device):
                return steps(args.steps)
        finally:
            Cadence.done = done

    def invariants():
        with watch(invariants_only=True, device=device):
            return steps(args.steps)

    settings = {"unwatched": unwatched, "two empty optimizer hooks": empty_hooks,
                "watch, invariants never checked": never_checked, "watch, invariants only": invariants}
    times = {name: [] for name in settings}
    for _ in range(args.repeats):
        for name, run in settings.items():
            times[name].append(run())
    base = statistics.median(times["unwatched"])
    print(f"torch {torch.__version__} on {device}, {args.steps} steps, median of {args.repeats}")
    print("| setting | ms per step | ratio |\n| --- | ---: | ---: |")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.3f} | {statistics.median(values) / base:.2f}x |")
    rows = [[name, round(statistics.median(values), 3), f"{statistics.median(values) / base:.2f}x"] for name, values in times.items()]
    _record.write(args.out, "watch-hooks", device=device, table=_record.table(["setting", "ms per step", "ratio"], rows),
                  figures={"steps": args.steps, "repeats": args.repeats})


if __name__ == "__main__":
    main()
