"""bench/'s one entry point: run a measurement (or several in one call), keep its record, write the index.

    python3 bench/run.py NAME [OPTIONS]                        # one measurement: bench/runners/NAME.py (- for _)
    python3 bench/run.py NAME [OPTIONS] + NAME [OPTIONS] ...   # several, one after the other: one device call
    python3 bench/run.py NAME --help                           # a runner's options
    python3 bench/run.py list                                  # the runners and the investigation scripts
    python3 bench/run.py keep PAGE OUT/NAME.json ...           # add runs' records to bench/data/PAGE.json
    python3 bench/run.py index [--check]                       # write bench/README.md (--check: say if it is stale)

Every runner takes ``--out DIR`` (where it writes, and where its record ``DIR/NAME.json`` goes), ``--device``
where a device applies and ``--ops`` where ops do. Two options of a measurement are run.py's own:

    --src DIR     run it with another tree's torchsleuth (DIR: that tree's src/): a before and after in one call
    --limit S     stop it after S seconds; what it wrote until then stays (a device call has minutes, not hours)

and one goes before the first NAME, for the whole call:

    --wheels DIR  install DIR's wheels (pip, no index, no dependencies) into a temporary folder on PYTHONPATH, for
                  a machine with no network (the GPU machine: expecttest, py-spy, carried beside the tree)

torchsleuth need not be installed: the runners run with this checkout's src/ on PYTHONPATH. Only the standard
library is imported here, so ``--help``, ``list`` and ``index`` are quick.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
INDEX = os.path.join(HERE, "README.md")
REGENERATE = re.compile(r"^Regenerate: `([^`]+)`", re.M)  # the line of a page naming its one command
DIGEST = "results.md"  # the headline figures, each from the page it cites


def runners() -> dict[str, str]:
    """Measurement name -> its script: every module of bench/runners/ but the shared ones (a leading ``_``)."""
    paths = sorted(glob.glob(os.path.join(HERE, "runners", "*.py")))
    return {_name(p): p for p in paths if not os.path.basename(p).startswith("_")}


def probes() -> dict[str, str]:
    """The investigation scripts: records of a past investigation, run by hand (each takes ``--out``)."""
    paths = sorted(glob.glob(os.path.join(HERE, "probes", "*.py")))
    return {os.path.basename(p): p for p in paths if not os.path.basename(p).startswith("_")}


def _name(path: str) -> str:
    return os.path.basename(path)[:-3].replace("_", "-")


def summary(path: str) -> str:
    """A script's docstring, first sentence: what it measures."""
    doc = ast.get_docstring(ast.parse(_read(path))) or ""
    return " ".join(doc.split("\n\n")[0].split())


def segments(words: list[str]) -> list[list[str]]:
    """``NAME ARGS + NAME ARGS``, split at each lone ``+``."""
    parts, current = [], []
    for word in words:
        if word == "+":
            parts.append(current)
            current = []
        else:
            current.append(word)
    return [p for p in [*parts, current] if p]


def measurements(command: str) -> list[str]:
    """The runners a ``python3 bench/run.py ...`` command line names, in order."""
    words = command.split()
    if "bench/run.py" not in words:
        return []
    words = words[words.index("bench/run.py") + 1:]
    if words[:1] == ["--wheels"]:
        words = words[2:]
    return [part[0] for part in segments(words)]


def _pop(words: list[str], flag: str) -> str | None:
    if flag in words:
        at = words.index(flag)
        value = words[at + 1]
        del words[at:at + 2]
        return value
    return None


def run_one(words: list[str], site: str | None) -> int:
    """One measurement in a process of its own; its exit status (124 when its --limit stopped it)."""
    name, args = words[0], list(words[1:])
    known = runners()
    if name not in known:
        print(f"bench/run.py: no runner {name!r}; the runners: {', '.join(known)}", file=sys.stderr)
        return 2
    src, limit = _pop(args, "--src"), _pop(args, "--limit")
    if "-h" in args or "--help" in args:
        print("(run.py's own, for any measurement: --src DIR, another tree's src/; --limit SECONDS)\n", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    path = [os.path.abspath(src) if src else os.path.join(ROOT, "src"), *([site] if site else []), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    if src:
        env["BENCH_SRC"] = "1"
    print(f"== bench/run.py {' '.join(words)}", file=sys.stderr, flush=True)
    process = subprocess.Popen([sys.executable, known[name], *args], cwd=ROOT, env=env, process_group=0)
    try:
        return process.wait(timeout=float(limit) if limit else None)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the runner and every worker it started
        process.wait()
        print(f"== {name} stopped by --limit {limit}", file=sys.stderr, flush=True)
        return 124
    except KeyboardInterrupt:
        os.killpg(process.pid, signal.SIGKILL)
        raise


def install(wheels: str) -> str:
    site = tempfile.mkdtemp(prefix="bench-site-")
    found = glob.glob(os.path.join(wheels, "*.whl"))
    if found:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", site, *found], check=True)
        bin_dir = os.path.join(site, "bin")  # a wheel's programs (py-spy)
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return site


# --- the data files and the index ---------------------------------------------------------------------


def dumps(value, indent: str = "") -> str:
    """JSON as the data files keep it: a dict a key a line, a list of plain values (a table's row) on one line."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)


def keep(page: str, files: list[str]) -> int:
    """Add the records runners wrote (``OUT/NAME.json``) to ``bench/data/PAGE.json``."""
    path = os.path.join(DATA, os.path.basename(page).removesuffix(".md").removesuffix(".json") + ".json")
    with open(path) as f:
        data = json.load(f)
    for file in files:
        with open(file) as f:
            data["records"].append(json.load(f))
    with open(path, "w") as f:
        f.write(dumps(data) + "\n")
    print(f"{path}: {len(files)} record(s) added; say what they show on {data['page']}")
    return 0


def pages() -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(HERE, "*.md")) if os.path.basename(p) != "README.md")


def data_files() -> dict[str, dict]:
    found = {}
    for path in sorted(glob.glob(os.path.join(DATA, "*.json"))):
        with open(path) as f:
            data = json.load(f)
        if isinstance(data, dict) and "page" in data:  # a page's figures (others are raw data the pages link to)
            found[os.path.basename(path)] = data
    return found


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _title(page: str) -> str:
    return next((line[2:].strip() for line in _read(os.path.join(HERE, page)).splitlines() if line.startswith("# ")), page)


def _shown(command: str) -> str:
    """A command for the index: each runner of a chain on a line of its own."""
    return command.replace(" + ", " \\\n  + ")


def index() -> str:
    """bench/README.md: every page with what it measures, its command and its data; the runners; the probes."""
    data = data_files()
    by_page = {d["page"]: (name, d) for name, d in data.items()}
    lines = [
        "# bench/: what torchsleuth found and what it costs, measured",
        "",
        "<!-- written by `python3 bench/run.py index`; tests/bench/test_bench_index.py checks it is current -->",
        "",
        "Each page below reports measurements in prose. Each names, on its `Regenerate:` line, the one command that",
        "makes its figures again, and keeps its figures as data in `data/PAGE.json` (the command, date, machine, torch",
        "and numbers of every run it reports; the page's prose and tables agree with it). The headline figures are in",
        f"[{DIGEST}]({DIGEST}).",
        "",
        "A command is `python3 bench/run.py NAME [OPTIONS]`, NAME one of the runners below; several joined by ` + ` run",
        "one after the other (one call of a rented GPU machine). Each writes under its `--out` folder and leaves there",
        "its record, `NAME.json`, of the shape the data files keep: `python3 bench/run.py keep PAGE OUT/NAME.json` adds",
        "it. On the GPU machine (torchsleuth not installed, no network) the same command line works from the repository",
        "root; `--wheels DIR` before NAME installs carried wheels first. `python3 bench/run.py NAME --help` says the rest.",
        "A page's figures were measured on the machine its records name; its command makes them again on the machine it",
        "runs on (`--device cuda`: a GPU machine).",
        "",
        "## Pages",
    ]
    for page in [DIGEST, *(p for p in pages() if p != DIGEST)]:
        name, d = by_page.get(page, (None, {}))
        data_link = f"[data/{name}](data/{name})" if name else "none"
        lines += ["", f"**[{page}]({page})**: {d.get('what', _title(page))}. Data: {data_link}.", "",
                  "```sh", _shown(d.get("command", "")), "```"]
    used: dict[str, set[str]] = {}
    for d in data.values():
        for command in [d.get("command", ""), *(r.get("command") or "" for r in d.get("records", []))]:
            for runner in measurements(command):
                used.setdefault(runner, set()).add(d["page"])
    lines += ["", "## Runners: one per measurement (`runners/`)", "",
              "`python3 bench/run.py NAME --help` for each; `runners/_*.py` are what they share.", "",
              "| NAME | what it measures | pages |", "| --- | --- | --- |"]
    for name, path in runners().items():
        cited = ", ".join(f"[{p}]({p})" for p in sorted(used.get(name, ())))
        lines.append(f"| `{name}` | {summary(path)} | {cited} |")
    lines += ["", "## Investigation scripts (`probes/`)", "",
              "Records of a past investigation, kept because a page cites what they showed: not runners of figures.",
              "Each takes `--out DIR` for what it prints; run them as `python3 bench/probes/NAME.py --help` says.", "",
              "| script | what it probed | pages |", "| --- | --- | --- |"]
    texts = {p: _read(os.path.join(HERE, p)) for p in pages()}
    for name, path in probes().items():
        cited = ", ".join(f"[{p}]({p})" for p, text in texts.items() if f"probes/{name}" in text)
        lines.append(f"| [`{name}`](probes/{name}) | {summary(path)} | {cited} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] == "list":
        for name, path in runners().items():
            print(f"{name:16s} {summary(path)}")
        print()
        for name, path in probes().items():
            print(f"probes/{name:22s} {summary(path)}")
        return 0
    if argv[0] == "index":
        text = index()
        if argv[1:] == ["--check"]:
            with open(INDEX) as f:
                stale = f.read() != text
            print("bench/README.md is stale: python3 bench/run.py index" if stale else "bench/README.md is current")
            return int(stale)
        with open(INDEX, "w") as f:
            f.write(text)
        return 0
    if argv[0] == "keep":
        usage = "usage: python3 bench/run.py keep PAGE OUT/NAME.json [...]: add runners' records to bench/data/PAGE.json"
        if len(argv) < 3 or argv[1] in ("-h", "--help"):
            print(usage)
            return 0 if argv[1:2] in (["-h"], ["--help"]) else 2
        if not os.path.exists(os.path.join(DATA, os.path.basename(argv[1]).removesuffix(".md").removesuffix(".json") + ".json")):
            print(f"no data file for page {argv[1]!r} in bench/data/; a page's data file is made with its page", file=sys.stderr)
            return 2
        return keep(argv[1], argv[2:])
    site = install(_pop(argv, "--wheels")) if argv[0] == "--wheels" else None
    codes = [run_one(words, site) for words in segments(argv)]
    failed = [code for code in codes if code != 0]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
