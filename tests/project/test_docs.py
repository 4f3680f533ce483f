"""The docs, checked: their examples run, their outputs are current, their flags and links exist.

Design note. README.md and docs/*.md mark the examples a reader can run with an HTML
comment on the line before the fence (docs/README.md, "Examples that run"):

* ``<!-- test -->`` runs the block and expects exit status 0; ``<!-- test: exit 1 -->``
  expects 1 (findings), any other number likewise.
* A ```sh block: each command (one line, or lines joined by a trailing backslash) runs
  with bash and must exit with that status.
* A ```text block starts with ``$ COMMAND``; the command runs, and what it prints on stdout
  (the progress bar, on stderr, is left out) must match the lines that follow once both are
  normalised: digit runs become ``#``, finding and group ids ``f-<id>``/``g-<id>``, a torch
  build's suffix (``+cpu``) is dropped, runs of spaces become one space and runs of one
  box-drawing character one character (a table's width), blank lines are dropped. A line
  holding only ``...`` stands for any number of lines. A changed word, or a line that
  appears or disappears, fails. Further ``$ `` lines start further commands.
* A ```python block runs as a script with this interpreter.

The marked blocks of one page run in order in one empty temporary folder (so a page can
sweep, then report on what it swept), with this interpreter's bin folder first on PATH
(its ``torchsleuth`` and ``python``), ``COLUMNS=100`` (the width the pasted outputs have),
and links to the repository's ``tests/`` (for ``tests/scenarios``) and ``examples/``.

Beyond the examples: every long flag of every command's ``--help`` appears on that
command's page, and every relative link of README.md, docs/*.md and bench/results.md
reaches a file (and a heading, when it names one).
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
BIN = Path(sys.executable).parent
COLUMNS = "100"
TIMEOUT = 180  # seconds for one command; the examples are meant to take a few

MARKER = re.compile(r"^<!--\s*test(?::\s*exit\s+(\d+))?\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
ELLIPSIS = "..."

# Which page documents each command's flags.
FLAG_PAGES = {
    "ops": "ops.md",
    "optim": "optim.md",
    "shard": "shard.md",
    "watch": "watch.md",
    "report": "reports.md",
    "diff": "reports.md",
    "repro": "reports.md",
    "runs": "reports.md",
    "drill": "drill.md",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marked: bool
    exit: int  # the exit status the marker expects

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, each with the marker on the line before it, if any."""
    found, lines = [], page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"{page.relative_to(ROOT)}:{i + 1}: a fence that is never closed"
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before.strip())
        found.append(Block(
            page=page, line=i + 1, lang=fence[1], text="\n".join(lines[i + 1:end]),
            marked=marker is not None, exit=int(marker[1] or 0) if marker else 0,
        ))
        i = end + 1
    return found


def commands(script: str) -> list[str]:
    """The commands of a ```sh block: one a line, a trailing backslash joining lines; comments left to bash."""
    joined = re.sub(r"\\\n", " ", script)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def normal(text: str, folder: Path) -> list[str]:
    """Lines compared by the output check: numbers, ids, spacing and table widths normalised away."""
    text = text.replace(str(folder), "").replace(str(BIN), ".venv/bin").replace(str(ROOT), "")
    out = []
    for line in text.splitlines():
        line = re.sub(r"\b([fg])-[0-9a-f]{8,}\b", r"\1-<id>", line)
        line = re.sub(r"\b(\d+\.\d+\.\d+)\+(?:cpu|cu\d+|rocm[\d.]+|xpu)\b", r"\1", line)  # a torch build is a torch version
        line = re.sub(r"\d+", "#", line)
        line = re.sub(r"([\u2500-\u257f])\1+", r"\1", line)  # a table's width is not its content
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` is ``expected`` line for line, a ``...`` line standing for any lines."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if line == ELLIPSIS else re.escape(line) + r"\n" for line in expected)
    return re.fullmatch(pattern, "".join(line + "\n" for line in actual)) is not None


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = COLUMNS
    env.pop("TORCHSLEUTH_DEVICE", None)
    return env


def run(command: list[str] | str, folder: Path) -> subprocess.CompletedProcess:
    argv = ["bash", "-o", "pipefail", "-c", command] if isinstance(command, str) else command
    return subprocess.run(
        argv, cwd=folder, env=environment(), capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
    )


def tail(done: subprocess.CompletedProcess) -> str:
    return (done.stdout[-2000:] + "\n" + done.stderr[-2000:]).strip()


def check(block: Block, folder: Path, number: int) -> list[str]:
    """Runs one marked block in ``folder``; returns what was wrong, one message each."""
    if block.lang == "sh":
        problems = []
        for command in commands(block.text):
            done = run(command, folder)
            if done.returncode != block.exit:
                problems.append(f"{block.where}: `{command}` exited {done.returncode}, the page says {block.exit}:\n{tail(done)}")
        return problems
    if block.lang == "python":
        script = folder / f"example_{number}.py"
        script.write_text(block.text + "\n", encoding="utf-8")
        done = run([sys.executable, script.name], folder)
        if done.returncode != block.exit:
            return [f"{block.where}: the python example exited {done.returncode}, the page says {block.exit}:\n{tail(done)}"]
        return []
    if block.lang == "text":
        return check_output(block, folder)
    return [f"{block.where}: a marked block must be sh, text or python, not {block.lang or 'unlabelled'!r}"]


def check_output(block: Block, folder: Path) -> list[str]:
    lines = block.text.splitlines()
    if not lines or not lines[0].startswith("$ "):
        return [f"{block.where}: a marked text block starts with `$ COMMAND`"]
    problems, starts = [], [i for i, line in enumerate(lines) if line.startswith("$ ")]
    for start, end in zip(starts, starts[1:] + [len(lines)]):
        command = lines[start][2:]
        done = run(command, folder)
        if done.returncode != block.exit:
            problems.append(f"{block.where}: `{command}` exited {done.returncode}, the page says {block.exit}:\n{done.stderr[-2000:]}")
        expected, actual = normal("\n".join(lines[start + 1:end]), folder), normal(done.stdout, folder)
        if not matches(expected, actual):
            diff = "\n".join(difflib.unified_diff(expected, actual, "the page", "a fresh run", lineterm="", n=1))
            problems.append(
                f"{block.where}: the output of `{command}` is not what the page shows (normalised; `...` lines "
                f"elide):\n{diff}\n--- the fresh output, to paste (COLUMNS={COLUMNS}):\n{done.stdout}"
            )
    return problems


def run_page(page: Path, folder: Path) -> list[str]:
    """Runs the marked blocks of ``page`` in order in ``folder``; what was wrong, one message each."""
    (folder / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    (folder / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    marked = [b for b in blocks(page) if b.marked]
    return [p for number, block in enumerate(marked) for p in check(block, folder, number)]


@pytest.fixture(scope="session")
def page_runs(request, tmp_path_factory):
    """Every selected page's examples, started at once, a page per thread: most of an example's time is one
    process importing torch, so two pages at a time take about half as long on 2 cores."""
    selected = [item.callspec.params["page"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_examples_run"]
    selected.sort(key=lambda page: -sum(b.marked for b in blocks(page)))  # the longest first, so none is left to run alone
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        yield {page: pool.submit(run_page, page, tmp_path_factory.mktemp(page.stem)) for page in selected}


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run(page: Path, page_runs):
    problems = page_runs[page].result()
    assert not problems, "\n\n".join(problems)


def test_readme_starts_with_the_two_commands():
    """CI runs the README's second sh block verbatim (.ci/run); the first is how to sweep."""
    sh = [b for b in blocks(ROOT / "README.md") if b.lang == "sh"]
    assert len(sh) >= 2 and "torchsleuth ops" in sh[0].text and not sh[0].marked
    assert sh[1].text in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    marked = [b for b in blocks(ROOT / "README.md") if b.marked and b.lang == "text"]
    assert marked, "the README's short example is a marked text block, checked against a fresh run"


def _help_flags() -> dict[str, set[str]]:
    from torchsleuth.cli.main import build_parser

    parser = build_parser()
    (commands_action,) = [a for a in parser._actions if a.dest == "command"]
    return {
        name: {flag for action in sub._actions for flag in action.option_strings if flag.startswith("--")}
        for name, sub in commands_action.choices.items()
    }


def test_every_flag_is_documented():
    flags = _help_flags()
    assert set(flags) == set(FLAG_PAGES), "a command was added or removed: give it a page in FLAG_PAGES and docs/"
    missing = []
    for command, names in sorted(flags.items()):
        text = (DOCS / FLAG_PAGES[command]).read_text(encoding="utf-8")
        missing += [f"torchsleuth {command} {flag} (docs/{FLAG_PAGES[command]})"
                    for flag in sorted(names) if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)]
    assert not missing, "flags `--help` prints that the docs never mention:\n" + "\n".join(missing)


def test_every_search_and_oracle_has_its_row_in_the_manual():
    """The registries are the lists: a search or oracle added without its row in docs/ is named here."""
    from torchsleuth import search
    from torchsleuth.judge.plugin import BUILTIN

    rows = {page: set(re.findall(r"^\| `([\w:]+)` \|", (DOCS / page).read_text(encoding="utf-8"), re.M)) for page in ("ops.md", "oracles.md")}
    missing = [f"search {name} (docs/ops.md)" for name in search.names() if name not in rows["ops.md"]]
    missing += [f"oracle {name} (docs/oracles.md)" for name in BUILTIN.names() if name not in rows["oracles.md"]]
    assert not missing, "registered, but no row of the manual's table names it:\n" + "\n".join(missing)


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(m[1]) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def test_relative_links_resolve():
    broken = []
    for page in [*PAGES, ROOT / "bench" / "results.md"]:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        text = re.sub(r"`[^`\n]*`", "", text)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


def test_normalising_keeps_the_words():
    """The output check forgives numbers, ids and widths, never words or lines."""
    folder = Path("/nowhere")
    page = normal("run 1  ops: 64 cases in 3.7 s  40 pass\n┏━━━┳━━┓\ng-490fe9f2 diagnosis: gelu", folder)
    fresh = normal("run 12 ops: 1598 cases in 16.9 s 1298 pass\n┏━━━━━━┳━┓\ng-03fa20c2 diagnosis: gelu", folder)
    assert matches(page, fresh)
    assert not matches(page, normal("run 1 ops: 64 cases in 3.7 s 40 passed\n┏━┳━┓\ng-490fe9f2 diagnosis: gelu", folder))
    assert not matches(page, fresh + ["a new line"])
    assert not matches(page, fresh[:-1])
    assert matches(["a", ELLIPSIS, "d"], ["a", "b", "c", "d"]) and matches(["a", ELLIPSIS, "d"], ["a", "d"])
    assert not matches(["a", ELLIPSIS, "d"], ["a", "b", "c"])
