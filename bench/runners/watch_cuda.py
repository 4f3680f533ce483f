"""`torchsleuth watch` on a CUDA device: clean models stay clean, the seed story's plant is found, and what it costs.

    python3 bench/run.py watch-cuda [--device cuda] [--steps 30] [--long 300] [--overhead-only] [--quick] --out DIR

Three parts, each printed as a section:

1. the small real models of the tests (an MLP, a channels_last CNN with
   BatchNorm, a transformer block) and the seed story's sparse autoencoder,
   trained on the device under watch with every call judged: the findings
   (there should be none) and how many calls were judged;
2. the seed story's bug planted in the device's kernels (in-place addcmul_
   and addcdiv_ drop their writes on a non-contiguous self) and the
   autoencoder watched: what watch names;
3. the overhead of watching a 4-layer MLP (512 wide, batch 256, Adam) on the
   device, side by side in one process: median of 3 of 30 steps each (``--quick``: without the slowest setting,
   every call judged), and what the invariants add to a step in kernels and in ATen calls (``torch.profiler``'s
   counts over 16 steps, watched and unwatched).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import _record

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "scenarios"))  # the tests' models


def train(model, data, device: str, steps: int) -> float:
    import torch

    model = model.to(device)
    data = data.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        optimizer.zero_grad()
        out = model(data)
        loss = (out[0] if isinstance(out, tuple) else out).float().pow(2).mean()
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize() if device.startswith("cuda") else None
    return float(loss.detach())


def clean(device: str) -> None:
    import models
    import sae
    import torch

    from torchsleuth import watch

    print("## clean models, every call judged")
    builds = {"mlp": models.mlp, "cnn (channels_last)": models.cnn, "transformer block": models.transformer,
              "sparse autoencoder": lambda: (sae.SparseAutoencoder(), torch.randn(16, 32))}
    for name, build in builds.items():
        torch.manual_seed(0)
        model, data = build()
        with watch(repeats=True, device=device) as w:
            train(model, data, device, 3)
        errors = dict(w.shadow.errors.most_common(3))
        print(f"{name}: {w.shadow.judged} calls judged, {len(w.findings)} findings, {sum(w.shadow.errors.values())} not judged {errors}")
        for f in w.findings:
            print(f"  {f.kind} {f.op} {f.layouts}: {f.summary} [{f.detail[:160]}]")


def planted(device: str) -> None:
    import sae
    import torch

    from torchsleuth import watch

    print("## the seed story's bug planted in the device's addcmul_ and addcdiv_")

    def addcmul_(self, tensor1, tensor2, *, value=1):
        return self if not self.is_contiguous() else self.add_(tensor1 * tensor2 * value)

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        return self if not self.is_contiguous() else self.add_(tensor1 / tensor2 * value)

    key = "CUDA" if device.startswith("cuda") else "CPU"
    library = torch.library.Library("aten", "IMPL")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        library.impl("addcmul_", addcmul_, key)
        library.impl("addcdiv_", addcdiv_, key)
    torch.manual_seed(0)
    model = sae.SparseAutoencoder().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    data = torch.randn(16, 32, device=device)
    with watch(device=device) as w:
        for _ in range(5):
            optimizer.zero_grad()
            reconstruction, code = model(data)
            (torch.nn.functional.mse_loss(reconstruction, data) + 1e-3 * code.abs().mean()).backward()
            optimizer.step()
    library._destroy()
    for f in w.findings:
        print(f"  {f.kind} {f.op} {f.layouts}: {f.summary} [{f.detail[:200]}]")


def mlp(device: str):
    """The overhead's loop: a 4 x 512 MLP with GELU, Adam, a batch of 256 (from seed 0)."""
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(512, 512), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, optimizer, torch.randn(256, 512, device=device), torch.randint(0, 10, (256,), device=device)


def overhead(device: str, steps: int, long: int = 0, quick: bool = False) -> None:
    """Each setting's time over ``steps`` steps (median of 3, interleaved); with ``long``, over ``long`` steps too,
    and the ratio of the steps between the two: what watching costs a step once the first calls are judged.
    Returns the table printed (the record's)."""
    import torch

    from torchsleuth import watch

    print(f"## overhead on {device}: MLP 4x512, batch 256, Adam, {steps} steps{f' and {long}' if long else ''}, median of 3")

    def loop(n, profiled=False):
        model, optimizer, data, target = mlp(device)
        steps = range(n)
        if profiled:  # the same loop, its last 16 steps profiled
            for _ in range(n - 16):
                one_step(model, optimizer, data, target)
            steps = range(16)
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
            profiler.__enter__()
        for _ in steps:
            one_step(model, optimizer, data, target)
        torch.cuda.synchronize() if device.startswith("cuda") else None
        if profiled:
            profiler.__exit__(None, None, None)
            events = profiler.key_averages()
            kernels = sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
            return kernels / 16, sum(e.count for e in events if e.key.startswith("aten::")) / 16

    def one_step(model, optimizer, data, target):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        optimizer.step()

    if device.startswith("cuda"):
        loop(20)
        bare = loop(20, profiled=True)
        with watch(device=device, invariants_only=True):
            watched = loop(20, profiled=True)
        print(f"per step, unwatched / invariants only: kernels {bare[0]:.1f} / {watched[0]:.1f} (+{watched[0] - bare[0]:.1f}), "
              f"aten calls {bare[1]:.1f} / {watched[1]:.1f} (+{watched[1] - bare[1]:.1f})")

    settings = {"unwatched": None, "invariants only": dict(invariants_only=True),
                "shadow, each distinct call once (default)": dict(), "shadow, every call": dict(repeats=True)}
    if quick:
        del settings["shadow, every call"]
    lengths = (steps, long) if long else (steps,)
    loop(steps)
    sampled = {}
    times = {(name, n): [] for name in settings for n in lengths if n == steps or name != "shadow, every call"}
    for _ in range(3):
        for name, n in times:
            options = settings[name]
            start = time.perf_counter()
            if options is None:
                loop(n)
            else:
                with watch(device=device, **options) as w:
                    loop(n)
                sampled[name, n] = w.checks.sampled() if hasattr(w.checks, "sampled") else ""  # older trees: every step
            times[name, n].append(time.perf_counter() - start)
    median = {key: statistics.median(values) for key, values in times.items()}
    for (name, n), said in sampled.items():
        if said:
            print(f"{name}, {n} steps: {said}")
    base = median["unwatched", steps]
    if not long:
        columns = ["setting", "seconds", "ratio"]
        rows = [[name, round(median[name, steps], 2), f"{median[name, steps] / base:.2f}x"] for name in settings]
    else:
        step = (median["unwatched", long] - base) / (long - steps)
        columns = ["setting", f"{steps} steps: s", "ratio", f"{long} steps: s", "ratio", f"per step after the first {steps}: ms", "ratio"]
        rows = []
        for name in settings:
            row = [name, round(median[name, steps], 2), f"{median[name, steps] / base:.2f}x"]
            if (name, long) in median:
                marginal = (median[name, long] - median[name, steps]) / (long - steps)
                row += [round(median[name, long], 2), f"{median[name, long] / median['unwatched', long]:.2f}x", round(1e3 * marginal, 2),
                        f"{marginal / step:.2f}x"]
            rows.append(row + [None] * (len(columns) - len(row)))
    print("| " + " | ".join(columns) + " |\n| --- |" + " ---: |" * (len(columns) - 1))
    for row in rows:
        print("| " + " | ".join("" if cell is None else str(cell) for cell in row) + " |")
    return _record.table(columns, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--long", type=int, default=0, help="also time each setting over this many steps: the cost per step once judged")
    parser.add_argument("--overhead-only", action="store_true", help="only part 3")
    parser.add_argument("--quick", action="store_true", help="part 3 without the setting that judges every call")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the record goes (watch-cuda.json: part 3's table)")
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'}")
    if not args.overhead_only:
        clean(args.device)
        planted(args.device)
    table = overhead(args.device, args.steps, args.long, args.quick)
    _record.write(args.out, "watch-cuda", device=args.device, table=table)


if __name__ == "__main__":
    main()
