"""bench/ as a product, checked: an index of every page, one command per page that makes its figures again, the
figures kept as data that agrees with the prose, no numbered scripts, no machine's paths.

Design note. bench/run.py is the one entry point (its runners in bench/runners/, one per measurement) and writes the
index, bench/README.md. Each check here is a function returning what is wrong (an empty list when nothing is), run
over the real bench/ by one test and over broken samples by another, so that a check that stopped finding anything
would fail too. Nothing here imports torch: the runners' ``--help`` runs in subprocesses, all at once (a few seconds).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
MACHINE = re.compile(r"/(?:tmp|work|root|home)/")
NUMBERED = re.compile(r"h200_batch|batch\d+\.(?:sh|py)$")
REQUIRED = ("command", "date", "machine", "torch")


def _load_run():
    spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = _load_run()


# --- the checks: each returns what is wrong ------------------------------------------------------------


def page_problems(page: str, text: str, data: dict | None) -> list[str]:
    """One ``Regenerate:`` command, naming runners that exist; its data file there, for this page, with that command."""
    problems = []
    commands = run.REGENERATE.findall(text)
    if len(commands) != 1:
        return [f"{page}: {len(commands)} 'Regenerate: `...`' lines, want exactly one"]
    command = commands[0]
    known = run.runners()
    named = run.measurements(command)
    if not named:
        problems.append(f"{page}: its command is not `python3 bench/run.py NAME ...`: {command}")
    problems += [f"{page}: its command names no runner {name!r}" for name in named if name not in known]
    stem = page.removesuffix(".md")
    if data is None:
        return problems + [f"{page}: no data file bench/data/{stem}.json"]
    if f"data/{stem}.json" not in text:
        problems.append(f"{page}: does not link its data file data/{stem}.json")
    if data.get("page") != page:
        problems.append(f"data/{stem}.json: says it is {data.get('page')!r}'s")
    if data.get("command") != command:
        problems.append(f"data/{stem}.json: its command differs from the page's:\n  {data.get('command')}\n  {command}")
    return problems


def record_problems(name: str, data: dict) -> list[str]:
    """Every record has its keys, names runners that exist (or says why it has no command), and a sane table."""
    problems = [] if data.get("records") else [f"{name}: no records"]
    known = run.runners()
    for i, record in enumerate(data.get("records", [])):
        where = f"{name} record {i} ({record.get('label', '')})"
        problems += [f"{where}: no {key!r}" for key in REQUIRED if key not in record]
        command = record.get("command")
        if command is None and not record.get("note"):
            problems.append(f"{where}: no command, and no note saying why")
        elif command is not None:
            named = run.measurements(command)
            if not named or any(n not in known for n in named):
                problems.append(f"{where}: its command names no runner of bench/runners/: {command}")
        if "figures" not in record and "table" not in record:
            problems.append(f"{where}: neither figures nor a table")
        table = record.get("table")
        if table is not None and any(len(row) != len(table["columns"]) for row in table["rows"]):
            problems.append(f"{where}: a table row whose length is not its columns'")
    return problems


def _normal(text: str) -> str:
    text = text.replace("**", "").replace("\\|", "|")
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # 293,289 -> 293289
    return " ".join(text.split())


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    elif value is not None and not isinstance(value, bool):
        yield value


def disagreements(page: str, text: str, record: dict) -> list[str]:
    """The record's figures and table cells that its page does not state."""
    said, missing = _normal(text), []
    for value in _leaves([record.get("figures"), record.get("table", {}).get("rows")]):
        if isinstance(value, (int, float)):
            found = re.search(r"(?<![\d.])" + re.escape(str(value)) + r"(?!\d)", said)
        else:
            found = _normal(str(value)) in said
        if not found:
            missing.append(f"{page} ({record.get('label', record.get('date'))}): {value!r} is in its data, not in its prose")
    return missing


def machine_paths(name: str, text: str) -> list[str]:
    """A script or a data file names a machine's path anywhere; a page, in a command (code spans and blocks)."""
    if name.endswith(".md"):
        code = re.findall(r"^```.*?^```", text, flags=re.S | re.M) + re.findall(r"`[^`\n]+`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
        text = "\n".join(code)
    return [f"{name}: {line.strip()[:120]}" for line in text.splitlines() if MACHINE.search(line)]


def numbered(names: list[str]) -> list[str]:
    return [name for name in names if NUMBERED.search(name)]


def index_problems(index: str, pages: list[str]) -> list[str]:
    problems = [f"bench/README.md does not list {page}" for page in pages if f"[{page}]({page})" not in index]
    for target in re.findall(r"\]\(([^)#]+)\)", index):
        if not re.match(r"^[a-z]+:", target) and not (BENCH / target).exists():
            problems.append(f"bench/README.md links {target}, which is not there")
    return problems


# --- over the real bench/ ------------------------------------------------------------------------------


def _data() -> dict[str, dict]:
    found = {}
    for path in sorted((BENCH / "data").glob("*.json")):
        found[path.name] = json.loads(path.read_text(encoding="utf-8"))  # every data file parses
    return found


def test_the_index_is_current_and_lists_every_page():
    index = (BENCH / "README.md").read_text(encoding="utf-8")
    assert index == run.index(), "bench/README.md is stale: python3 bench/run.py index"
    assert not index_problems(index, run.pages())


def test_every_page_names_one_command_that_regenerates_it_and_keeps_its_figures_as_data():
    data = _data()
    problems = []
    for page in run.pages():
        text = (BENCH / page).read_text(encoding="utf-8")
        record = data.get(page.removesuffix(".md") + ".json")
        problems += page_problems(page, text, record)
        if record is not None:
            problems += record_problems(page.removesuffix(".md") + ".json", record)
            for r in record.get("records", []):
                problems += disagreements(page, text, r)
    assert not problems, "\n".join(problems)


def test_every_data_file_belongs_to_a_page_or_is_linked_from_one():
    pages = {page: (BENCH / page).read_text(encoding="utf-8") for page in run.pages()}
    orphans = [name for name, data in _data().items()
               if not (isinstance(data, dict) and data.get("page") in pages) and not any(f"data/{name}" in t for t in pages.values())]
    assert not orphans, f"data files no page reads: {orphans}"


def test_every_runner_shows_its_help():
    def help_of(name: str) -> tuple[str, int, str]:
        done = subprocess.run([sys.executable, str(BENCH / "run.py"), name, "--help"], capture_output=True, text=True, timeout=60)
        return name, done.returncode, done.stdout + done.stderr

    with ThreadPoolExecutor(8) as pool:
        failed = [f"{name}: exit {code}\n{said[-800:]}" for name, code, said in pool.map(help_of, run.runners())
                  if code != 0 or "usage:" not in said]
    assert not failed, "\n".join(failed)


def test_no_numbered_scripts_and_no_machine_paths_under_bench():
    files = [p for p in BENCH.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert not numbered([p.name for p in files])
    problems = []
    for path in files:
        if path.suffix in (".py", ".sh", ".md", ".json", ".txt", ".csv"):
            problems += machine_paths(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    assert not problems, "machine paths (write $OUT, or a path relative to the repository):\n" + "\n".join(problems)


# --- the checks find what they are for ----------------------------------------------------------------


def test_each_check_finds_what_it_is_for():
    good = "# A page\n\nRegenerate: `python3 bench/run.py sweep --out \"$OUT\" ops` (data: [data/a.json](data/a.json))\n\n12,345 cases in 6.5 s\n"
    data = {"page": "a.md", "command": 'python3 bench/run.py sweep --out "$OUT" ops',
            "records": [{"command": 'python3 bench/run.py sweep --out "$OUT" ops', "date": "d", "machine": "m", "torch": "t",
                         "figures": {"cases": 12345, "wall_s": 6.5}}]}
    assert not page_problems("a.md", good, data) and not record_problems("a.json", data)
    assert not disagreements("a.md", good, data["records"][0])
    assert page_problems("a.md", good + "Regenerate: `python3 bench/run.py sweep`\n", data)  # two commands
    assert page_problems("a.md", good.replace("Regenerate", "Run"), data)  # none
    assert page_problems("a.md", good.replace("run.py sweep", "run.py nosuch"), data)  # a runner that is not there
    assert page_problems("a.md", good, None)  # no data file
    assert page_problems("a.md", good, {**data, "command": "python3 bench/run.py catalog"})  # the data names another command
    assert record_problems("a.json", {**data, "records": [{"figures": {}}]})  # a record without its keys
    assert disagreements("a.md", good, {"figures": {"cases": 12346}})  # a figure the prose does not state
    assert disagreements("a.md", good, {"table": {"columns": ["s"], "rows": [[6.4]]}})
    assert machine_paths("x.py", "open('/tmp/run/x')") and machine_paths("x.md", "run `torchsleuth ops --out /work/x`")
    assert not machine_paths("x.md", 'run `torchsleuth ops --out "$OUT"`; the temporary folder is fine in prose: /tmp/')
    assert numbered(["h200_batch42.sh", "h200_batch9.py"]) and not numbered(["catalog.py", "run.py"])
    assert index_problems("| [results.md](results.md) |", ["cpu-sweep.md", "results.md"]) == ["bench/README.md does not list cpu-sweep.md"]
    assert index_problems("| [nosuch.md](nosuch.md) |", []) == ["bench/README.md links nosuch.md, which is not there"]
