"""How long each phase of the fork server's preload (workers.preload) takes, in one fresh process beside a GPU.

    python3 bench/probes/preload_phases.py [--out DIR]

Importing torch and torchsleuth.sweep, then the server's own load of OpInfo's catalog with the capability NVML gives
(``load_catalog_beside_a_gpu``), each timed; and whether the process is still safe to fork from. Run twice on an H200
on 2026-12-03 (bench/cuda-sweep.md, "The server's preload, phase by phase"), when the preload also tried the load in
a forked child first (``tried_in_a_child``, since removed: that phase is timed where a tree still has it). Prints one
JSON line (``--out DIR``: appended to DIR/preload-phases.jsonl too).
"""

from __future__ import annotations

import argparse
import json
import os
import time

T0 = time.monotonic()
MARK = 'if os.environ.get(LEAVE_CATALOG) == "0":'  # where workers.preload stops defining and starts loading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", metavar="DIR")
    args = parser.parse_args()
    import _out  # noqa: F401  (torchsleuth from this checkout where it is not installed)

    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch  # noqa: F401  (its import is timed)

    import torchsleuth
    import torchsleuth.sweep  # noqa: F401  (what the server preloads first)

    imported = time.monotonic() - T0
    with open(os.path.join(os.path.dirname(torchsleuth.__file__), "workers", "preload.py")) as f:
        source = f.read()
    top = source[:source.index(MARK)] if MARK in source else source[:source.index("if not torch.cuda.is_available():")]
    namespace = {"__name__": "torchsleuth.workers._phases", "__package__": "torchsleuth.workers"}
    exec(compile(top, "preload.py", "exec"), namespace)  # the functions, not the load the module makes
    capability = namespace["_nvml_capability"]()
    found = {"import_s": round(imported, 2), "capability": capability}
    if "tried_in_a_child" in namespace:
        t = time.monotonic()
        found["child_ok"] = namespace["tried_in_a_child"](lambda: namespace["load_catalog_beside_a_gpu"](capability))
        found["child_s"] = round(time.monotonic() - t, 2)
    t = time.monotonic()
    found["own_ok"] = namespace["load_catalog_beside_a_gpu"](capability) if capability else None
    found["own_s"] = round(time.monotonic() - t, 2)
    found["safe"] = namespace["safe_to_fork"]()
    print(json.dumps(found))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "preload-phases.jsonl"), "a") as f:
            f.write(json.dumps(found) + "\n")


if __name__ == "__main__":
    main()
