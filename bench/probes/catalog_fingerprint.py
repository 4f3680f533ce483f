"""What a worker reads of OpInfo's catalog, as one JSON line: the same in every process that loads the same catalog.

    python3 bench/probes/catalog_fingerprint.py preload --out DIR   # as the pool's fork server loads it (workers.preload)
    python3 bench/probes/catalog_fingerprint.py context --out DIR   # as a worker loads it, after making its CUDA context
    python3 bench/probes/catalog_fingerprint.py compare --out DIR   # the two files written: how many ops differ

Per op (every op; the float32 samples of every 5th): the dtypes it declares on the CPU and CUDA (and for backward on
CUDA), whether it has out= and autograd, its tolerance overrides on CUDA per dtype, and its samples' shapes. The
``preload`` form also prints whether the server loaded the catalog and was still safe to fork from. Each writes
DIR/fingerprint-FORM.json (the whole fingerprint); ``compare`` reads both (2026-12-03, bench/cuda-sweep.md: the same).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import _out  # noqa: F401  (torchsleuth from this checkout where it is not installed)


def fingerprint(opinfo, torch) -> dict:
    found = {}
    for i, (name, entry) in enumerate(sorted(opinfo.catalog().items())):
        row = [sorted(map(str, opinfo.dtypes(entry, "cpu"))), sorted(map(str, opinfo.dtypes(entry, "cuda"))),
               sorted(map(str, opinfo.dtypes(entry, "cuda", backward=True))),
               bool(getattr(entry, "supports_out", False)), bool(getattr(entry, "supports_autograd", False)),
               [str(opinfo.tolerance_override(entry, "cuda", d)) for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64)]]
        if i % 5 == 0:
            try:
                row.append([str(tuple(s.input.shape)) if isinstance(s.input, torch.Tensor) else type(s.input).__name__
                            for s in opinfo.samples(entry, torch.float32)])
            except Exception as e:
                row.append(type(e).__name__)
        found[name] = row
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("form", choices=("preload", "context", "compare"))
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.form == "compare":
        a, b = (json.load(open(os.path.join(args.out, f"fingerprint-{form}.json"))) for form in ("preload", "context"))
        differ = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        print(len(a), "ops;", len(differ), "differ:", differ[:20])
        return 0
    if args.form == "preload":
        from torchsleuth.workers import preload
        head = {"catalog": preload.CATALOG, "fork_safe": preload.FORK_SAFE}
    else:
        import torch
        torch.zeros(1, device="cuda")
        head = {}
    import torch
    from torchsleuth.cases import opinfo
    found = fingerprint(opinfo, torch)
    text = json.dumps(found, sort_keys=True)
    print(json.dumps({**head, "ops": len(found), "sha": hashlib.sha256(text.encode()).hexdigest()[:16]}))
    with open(os.path.join(args.out, f"fingerprint-{args.form}.json"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
