"""`torchsleuth.check` on a device: a custom op that ignores strides, and its correct twin, each checked deep.

    python3 bench/run.py check --device cuda --out DIR

The ops are ``tests/check_ops.py``'s (``tsl_check::scale_bad`` reads its input's memory as if contiguous,
``tsl_check::scale_good`` is ``x * alpha``), each given the samples ``(torch.randn(4, 6), 2.5)`` and
``(torch.randn(3, 5, 2), -1.25)``, with the defaults otherwise (deep: the searches and the cheap oracles). Per op:
cases, seconds, statuses, findings and groups, and the message ``check`` says; the record (DIR/check.json) is that
table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import _record

sys.path.insert(0, os.path.join(_record.ROOT, "tests"))  # check_ops: the tests' custom ops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import check_ops
    import torch

    import torchsleuth

    print("torch", torch.__version__, torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu")
    rows = []
    for name in ("scale_bad", "scale_good"):
        op = getattr(check_ops, name)
        start = time.time()
        result = torchsleuth.check(op, [(torch.randn(4, 6), 2.5), (torch.randn(3, 5, 2), -1.25)], device=args.device, dtypes=args.dtypes,
                                   out=os.path.join(args.out, name))
        seconds = time.time() - start
        statuses = dict(result.sweep.statuses)
        print(f"{result.op}: {result.sweep.cases} cases in {seconds:.1f} s, {statuses}")
        print(result.message())
        rows.append([result.op, result.sweep.cases, round(seconds, 1), statuses, len(result.sweep.findings), len(result.sweep.groups)])
    _record.write(args.out, "check", device=args.device,
                  table=_record.table(["op", "cases", "seconds", "statuses", "findings", "groups"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
