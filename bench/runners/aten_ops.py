"""aten's overloads beyond OpInfo: which are entries, which `aten.*` names, which make samples and why not (aten-ops.md).

    python3 bench/run.py aten-ops --out DIR        # prints Markdown tables; the record (DIR/aten-ops.json) holds them

Nothing here runs a sweep; it resolves names and probes the generated calls (in child processes, as the sweep does).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time

import _record


def reason_class(reason: str) -> str:
    """A reason with its particulars (the argument, the error's text) cut off, so that reasons count together."""
    if reason.startswith("it takes"):
        return re.sub(r"it takes (\S+) \S+,", r"it takes \1 ARG,", reason)
    if reason.startswith("a generated call"):
        return reason.partition(":")[0]
    if reason.startswith("no call generated"):
        error = reason.partition(": ")[2]
        return "no call generated from the schema succeeded: " + error.partition(":")[0]
    return reason


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import torch

    from torchsleuth.cases import schema, select

    every = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")]
    excluded = collections.Counter()
    for qualified in every:
        base, _, overload = qualified[len("aten::"):].partition(".")
        op = schema.overload_of(f"aten.{base}.{overload or 'default'}")
        excluded[schema.excluded(op) if op is not None else "no Python overload"] += 1
    print(f"aten overloads registered: {len(every)}; entries: {len(schema.aten_names())}\n")
    print("| not an entry because | overloads |\n| --- | ---: |")
    for reason, count in excluded.most_common():
        if reason:
            print(f"| {reason} | {count} |")

    named = select.resolve_ops("aten.*")
    started = time.monotonic()
    entries = [schema.for_name(name) for name in named]
    made = [e for e in entries if e.supported_dtypes("cpu")]
    print(f"\n`aten.*` names {len(named)} overloads; {len(made)} make samples "
          f"({sum(bool(e.supports_autograd) for e in made)} with a backward); probing took {time.monotonic() - started:.0f} s\n")
    reasons = collections.Counter(reason_class(e.reason) for e in entries if e not in made)
    print("| no samples because | overloads |\n| --- | ---: |")
    for reason, count in reasons.most_common():
        print(f"| {reason} | {count} |")
    crashed = [f"{e.name}: {e.reason}" for e in entries if e.reason.startswith("a generated call")]
    if crashed:
        print("\ncalls that kill or hang the probe process:\n")
        print("\n".join(f"- {line}" for line in crashed))
    figures = {"registered": len(every), "entries": len(schema.aten_names()), "named": len(named), "make samples": len(made),
               "with a backward": sum(bool(e.supports_autograd) for e in made),
               "not an entry because": {reason: count for reason, count in excluded.most_common() if reason},
               "no samples because": dict(reasons.most_common())}
    _record.write(args.out, "aten-ops", figures=figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
