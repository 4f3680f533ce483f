"""Each finding group's repro script, run: does it still reproduce?

    python3 bench/run.py repros DIR/findings.json [--all] [--timeout 60] [--out DIR]

A repro exits 1 while its bug is present, 0 once it is gone, 2 when it cannot
check. Prints a Markdown table: group, op, kind, variant, dtype, layouts, the
repro's exit status and its last line; with ``--out``, the same table and the
exit statuses counted are its record (DIR/repros.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import _record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("findings", help="a findings file (torchsleuth ops --json)")
    parser.add_argument("--all", action="store_true", help="every finding, not one per group")
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--out", metavar="DIR", help="where the record goes (repros.json)")
    args = parser.parse_args()
    path = Path(args.findings)
    document = json.loads(path.read_text())
    by_id = {f["id"]: f for f in document["findings"]}
    chosen = list(by_id) if args.all else [g["findings"][0] for g in document["groups"]]
    print("| group | op | kind | variant | dtype | layouts | repro exit | last line |")
    print("| --- | --- | --- | --- | --- | --- | ---: | --- |")
    counts: dict[int, int] = {}
    rows = []
    for finding_id in chosen:
        f = by_id[finding_id]
        script = path.parent / f["repro"] if f.get("repro") else None
        if script is None or not script.exists():
            code, last = None, "no repro script"
        else:
            try:
                run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=args.timeout)
                code = run.returncode
                lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
                last = lines[-1][:140] if lines else ""
            except subprocess.TimeoutExpired:
                code, last = "timeout", ""
        counts[code] = counts.get(code, 0) + 1
        layouts = ", ".join(f"{a['name']}={a['layout']}" for a in f["args"] if a.get("layout") not in (None, "contiguous")) or "contiguous"
        rows.append([f["group"], f["op"], f["kind"], f["variant"], f["dtype"], layouts, code, last])
        last = last.replace("|", "\\|")
        print(f"| {f['group']} | {f['op']} | {f['kind']} | {f['variant']} | {f['dtype']} | {layouts} | {code} | {last} |", flush=True)
    print(f"\nexit statuses: {counts}")
    if args.out:
        columns = ["group", "op", "kind", "variant", "dtype", "layouts", "repro exit", "last line"]
        _record.write(args.out, "repros", device=document.get("device") or "cpu", table=_record.table(columns, rows),
                      figures={"exit_statuses": {str(code): n for code, n in counts.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
