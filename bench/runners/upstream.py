"""Upstream reports of real findings: a pointed run per op, then `torchsleuth report --issue` of chosen groups.

    python3 bench/run.py upstream --out DIR [--pick OP:GROUP ...] [--torch PATH ...]
    python3 bench/run.py upstream --replay bench/upstream --out DIR     # the kept reports' snippets, under this torch

Each op of the picks is swept as `torchsleuth ops --ops OP` (into DIR/OP.db; a database already there is reused,
so a second call only writes the reports again); each group is then written as DIR/upstream/GROUP.md by
`torchsleuth report --issue GROUP`, which runs its snippet (or, failing that, the full repro script) before writing
it, and under each `--torch` interpreter too. The record: one row per group (the op, the title, what was filed, how
many lines, the verdict on this machine's torch, and on each `--torch` release: a column "torch VERSION" each, read
from the report's Releases table).

`--replay FOLDER` runs the snippet of every report kept in FOLDER with this interpreter's torch, importing nothing
of torchsleuth (a machine with another torch release and no torchsleuth, the GPU machine's): a snippet reproduces
when its last line raises AssertionError, as `report --issue` judges it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import _record

# The groups of bench/upstream.md: real findings of torch 2.13 on the CPU, triaged on the pages cited there.
PICKS = (
    "nn.functional.gelu:g-490fe9f2",  # gelu(out=) leaves a non-contiguous out unwritten (pointed-triage.md P3)
    "nn.functional.gelu:g-4de8c788",  # gelu(+inf) is NaN on the vector path (pointed-triage.md P2)
    "nn.functional.gelu:g-c0de7a60",  # the same, seen as a layout: the strided path is the scalar one
    "lgamma:g-c8d008c6",  # lgamma overflows in float32 where the result fits (thresholds.md)
    "lgamma:g-d010bbf4",  # the same in float64, judged by the exact oracle (no call recorded: the full script)
    "div.trunc_rounding:g-d3963a63",  # trunc of the rounded quotient (thresholds.md)
    "div.trunc_rounding:g-41354b5e",  # the same in bfloat16, the vector body against a lone element (a size finding)
)


def _torchsleuth(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(_record.ROOT, "src"), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "torchsleuth.cli.main", *argv], capture_output=True, text=True, env=env)


def _replay(folder: Path, out: str) -> int:
    import torch

    rows = []
    for report in sorted(folder.glob("g-*.md")):
        filed = re.search(r"```python\n(.*?)```", report.read_text(), re.S).group(1)
        if not filed.startswith("import torch\n"):
            continue  # a full repro script: it needs the run's own --import files, not a plain interpreter
        path = Path(out) / f"{report.stem}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(filed)
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
        raised = done.stderr.strip().splitlines()[-1:] or [""]
        last = f'"{path}", line {filed.count(chr(10))}' in done.stderr and "AssertionError" in done.stderr
        verdict = "reproduces" if done.returncode and last else "does not reproduce" if done.returncode == 0 else f"cannot tell: {raised[0][:80]}"
        rows.append([report.stem, torch.__version__, verdict])
        print(f"{report.stem}: torch {torch.__version__}: {verdict}", flush=True)
    _record.write(out, "upstream", table=_record.table(["group", "torch", "verdict"], rows),
                  figures={"snippets": len(rows), "reproduce": sum(r[2] == "reproduces" for r in rows)})
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", metavar="DIR", required=True, help="where the databases, the reports and the record go")
    parser.add_argument("--pick", metavar="OP:GROUP", nargs="+", default=list(PICKS), help="the groups to report (default: the page's)")
    parser.add_argument("--torch", metavar="PATH", nargs="+", default=[], help="python executables or venvs of other torch releases")
    parser.add_argument("--replay", metavar="FOLDER", help="run the snippets of the reports kept in FOLDER under this torch, and nothing else")
    args = parser.parse_args()
    if args.replay:
        return _replay(Path(args.replay), args.out)
    out = Path(args.out)
    (out / "upstream").mkdir(parents=True, exist_ok=True)
    rows, releases = [], []
    for pick in args.pick:
        op, _, group = pick.partition(":")
        db = out / f"{op}.db"
        if not db.exists():
            swept = _torchsleuth("ops", "--ops", op, "--no-progress", "--out", str(out / op), "--db", str(db))
            print(f"{op}: swept (exit {swept.returncode})", flush=True)
        report = out / "upstream" / f"{group}.md"
        made = _torchsleuth("report", "--issue", group, "--db", str(db), "-o", str(report), *(["--torch", *args.torch] if args.torch else []))
        if made.returncode != 0:
            rows.append([group, op, (made.stderr.strip().splitlines() or ["?"])[-1], "none", 0, "not written", *[""] * len(args.torch)])
            print(f"{group}: {rows[-1][2]}", flush=True)
            continue
        text = report.read_text()
        filed = re.search(r"```python\n(.*?)```", text, re.S).group(1)
        minimal = "(a minimal snippet;" in made.stdout
        verdict = re.search(r"^Output on torch \S+ \(([^)]+)\):", text, re.M).group(1)
        title = text.splitlines()[0].removeprefix("# ")
        # the Releases table: this machine's torch first, then each --torch one, in order
        ran = re.findall(r"^\| (\S+) \| ([^|]+) \|$", text.split("## Releases", 1)[1].split("##", 1)[0], re.M)[2:] if args.torch else []
        releases = releases or [f"torch {version}" for version, _ in ran[1:]]
        rows.append([group, op, title, "snippet" if minimal else "full script", len(filed.splitlines()), verdict, *[v for _, v in ran[1:]]])
        print(f"{group}: {'snippet' if minimal else 'full script'} of {len(filed.splitlines())} lines, {verdict}: {title}", flush=True)
    columns = ["group", "op", "title", "filed", "lines", "here", *(releases or [f"--torch {i + 1}" for i in range(len(args.torch))])]
    _record.write(args.out, "upstream", table=_record.table(columns, rows),
                  figures={"reports": len(rows), "snippets": sum(r[3] == "snippet" for r in rows),
                           "reproduce": sum(r[5] == "reproduces" for r in rows),
                           **{f"reproduce on {name}": sum(r[6 + i] == "reproduces" for r in rows) for i, name in enumerate(releases)}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
