"""py-spy's raw samples of pool workers, by phase: the outermost torchsleuth function below the engine.

    python bench/spy_read.py DIR/p_*.txt          # the files `py-spy record -f raw --idle` wrote, one per process

Each line of a raw file is one stack (frames outermost first, ``;``-separated) and how many samples it had. A
sample's phase is the first torchsleuth frame below the last ``engine.py`` frame (outside the engine: the innermost
torchsleuth frame, as for a worker loading the catalog or waiting for work); the three largest leaves of each phase
say what it was doing. Threads with no Python frame are left out. (bench/h200_batch22.sh records such files.)
"""

from __future__ import annotations

import collections
import sys


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    return f"{name} {where.rstrip(')').rsplit('/', 1)[-1]}"


def phase(frames: list[str]) -> str:
    engine = [i for i, f in enumerate(frames) if "torchsleuth/engine.py" in f]
    if not engine:
        ours = [f for f in frames if "torchsleuth/" in f]
        return "outside engine: " + (_short(ours[-1]).split(":")[0] if ours else _short(frames[-1]))
    below = frames[engine[-1] + 1:]
    ours = [f for f in below if "torchsleuth/" in f]
    if not ours:
        return f"engine {_short(frames[engine[-1]])} -> " + (_short(below[0]) if below else "itself")
    return _short(ours[0]).split(":")[0]


def main(paths: list[str]) -> int:
    phases, leaves, total = collections.Counter(), collections.defaultdict(collections.Counter), 0
    for path in paths:
        for line in open(path):
            stack, count = line.rstrip("\n").rsplit(" ", 1)
            frames = [f for f in stack.split(";") if f]
            if not frames:
                continue
            key = phase(frames)
            phases[key] += int(count)
            leaves[key][_short(frames[-1])] += int(count)
            total += int(count)
    print(f"{total} samples")
    for key, n in phases.most_common(30):
        top = ", ".join(f"{leaf} {m / n:.0%}" for leaf, m in leaves[key].most_common(3))
        print(f"{n / total:6.1%}  {key}  | {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
