"""What every runner shares: torchsleuth importable from this checkout, and the record a measurement leaves.

A runner ends by writing ``OUT/NAME.json``, one record of the shape ``bench/data/PAGE.json`` keeps under ``records``
(``python3 bench/run.py keep PAGE OUT/NAME.json`` adds it there):

    {"command": "python3 bench/run.py NAME ... --out \\"$OUT\\"", "date": ..., "machine": ..., "torch": ...,
     "figures": {NAME: NUMBER, ...}, "table": {"columns": [...], "rows": [[...], ...]}}

``command`` is the command that made it, with the output folder written ``$OUT``: a record names no machine's paths.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if importlib.util.find_spec("torchsleuth") is None:  # a machine where it is not installed: this checkout's
    sys.path.insert(0, os.path.join(ROOT, "src"))


def command(name: str, argv: list[str], out: str | None) -> str:
    """``python3 bench/run.py NAME ARGV``, the output folder (and paths under it) written ``$OUT``."""
    words = []
    out = out.rstrip("/") if out else None
    beside = os.path.dirname(os.path.abspath(out)) if out else None
    for arg in argv:
        path = os.path.abspath(arg) if arg.startswith(("/", "./", "../")) else None
        if out and (arg == out or arg.startswith(out + "/")):
            words.append('"$OUT' + arg[len(out):] + '"')
        elif path and path.startswith(ROOT + os.sep):  # in this checkout: relative to its root, where run.py runs
            words.append(shlex.quote(os.path.relpath(path, ROOT)))
        elif path and beside and path.startswith(beside + os.sep):  # beside the output folder (another run's)
            words.append('"$OUT/../' + os.path.relpath(path, beside) + '"')
        elif path:  # elsewhere on this machine: no machine's path in a record
            words.append(f'"$DIR/{os.path.basename(path)}"')
        else:
            words.append(shlex.quote(arg))
    if os.environ.get("BENCH_SRC"):  # run.py --src: another tree's torchsleuth, wherever it lies
        words = ['--src "$SRC"', *words]
    return " ".join(["python3", "bench/run.py", name, *words])


def machine(device: str = "cpu") -> str:
    """The CPU cores this process may use, and the GPUs where the device is one: no host name, no path."""
    said = f"{len(os.sched_getaffinity(0))} CPU cores"
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            said += ", " + ", ".join(f"{names.count(n)}x {n}" for n in dict.fromkeys(names))
    return said


def write(out: str, name: str, *, device: str = "cpu", figures: dict | None = None, table: dict | None = None,
          argv: list[str] | None = None, **extra) -> dict:
    """The record of one measurement, written to ``OUT/NAME.json`` and returned."""
    import torch

    record = {"command": command(name, sys.argv[1:] if argv is None else argv, out), "date": time.strftime("%Y-%m-%d %H:%M"),
              "machine": machine(device), "torch": torch.__version__, **extra}
    if figures is not None:
        record["figures"] = figures
    if table is not None:
        record["table"] = table
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return record


def table(columns: list[str], rows: list[list]) -> dict:
    return {"columns": list(columns), "rows": [list(row) for row in rows]}
