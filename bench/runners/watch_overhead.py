"""What watching costs: a training loop unwatched and watched, side by side in one process.

    python3 bench/run.py watch-overhead [--steps 30] [--repeats 3] [--settings "NAME;NAME"] --out DIR

The loop: a 4-layer MLP (512 wide, batch 256) trained with Adam on the CPU,
one thread. Each setting runs the same steps from the same seed; the figure
is the median of the repeats, and the ratio is to the unwatched loop
measured in the same run. The record (DIR/watch-overhead.json) is the table.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _record


def build():
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(512, 512), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(512, 10))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3), torch.randn(256, 512), torch.randint(0, 10, (256,))


def loop(steps: int) -> None:
    import torch

    model, optimizer, data, target = build()
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        optimizer.step()


SETTINGS = {
    "unwatched": None,
    "invariants only": dict(invariants_only=True),
    "shadow, each distinct call once (default)": dict(),
    "shadow, every call of every 10th step": dict(repeats=True, every=10),
    "shadow, 5% of all calls": dict(repeats=True, sample=0.05),
    "shadow, every call": dict(repeats=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", default="", help="setting names to run, separated by semicolons (default: all)")
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import torch

    from torchsleuth import watch

    chosen = {name: SETTINGS[name] for name in SETTINGS if not args.settings or name == "unwatched" or name in args.settings.split(";")}
    torch.set_num_threads(1)
    times = {name: [] for name in chosen}
    loop(2)  # warm up: the first steps pay for allocations and lazy initialisation
    with watch():
        loop(1)
    for _ in range(args.repeats):
        for name, options in chosen.items():  # interleaved, so drift hits every setting alike
            start = time.perf_counter()
            if options is None:
                loop(args.steps)
            else:
                with watch(**options):
                    loop(args.steps)
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["unwatched"])
    print(f"torch {torch.__version__}, {args.steps} steps, median of {args.repeats}, 1 thread")
    print("| setting | seconds | ratio |")
    print("| --- | ---: | ---: |")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.2f} | {statistics.median(values) / base:.2f}x |")
    rows = [[name, round(statistics.median(values), 2), f"{statistics.median(values) / base:.2f}x"] for name, values in times.items()]
    _record.write(args.out, "watch-overhead", table=_record.table(["setting", "seconds", "ratio"], rows),
                  figures={"steps": args.steps, "repeats": args.repeats})


if __name__ == "__main__":
    main()
