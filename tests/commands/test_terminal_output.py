"""What a user's terminal gets: 80 columns and pipes, names answered before anything loads, outputs refused first, exit statuses.

The sweep runs as a user runs it: the installed command in a pseudo-terminal 80 columns wide, and in a pipe.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchsleuth import names
from torchsleuth.cli import precheck
from torchsleuth.cli.main import main
from torchsleuth.errors import ExitCode, UsageError
from torchsleuth.store.sqlite import Store

BIN = Path(sys.executable).parent
SWEEP = ["ops", "--ops", "nn.functional.gelu", "--dtypes", "float32", "--variants", "out", "--layouts", "transposed", "--search", "none",
         "--no-shrink", "--workers", "0", "--no-progress"]
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def environment(**extra) -> dict:
    return {**os.environ, "COLUMNS": "80", "LINES": "40", "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), **extra}


def in_a_terminal(argv: list[str], cwd: Path) -> tuple[int, str]:
    """The command run in a pseudo-terminal 80 columns wide: its exit status and what the terminal showed (escapes left out)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, as a user types it
        os.chdir(cwd)
        os.execve(str(BIN / "torchsleuth"), ["torchsleuth", *argv], environment())
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), ESCAPE.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def in_a_pipe(argv: list[str], cwd: Path, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "torchsleuth"), *argv], cwd=cwd, env=environment(**extra), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep, once in an 80-column terminal and once in a pipe; then `runs` in the terminal."""
    folder = tmp_path_factory.mktemp("terminal")
    terminal = in_a_terminal([*SWEEP, "--json", "first.json"], folder)
    piped = in_a_pipe([*SWEEP, "--json", "second.json"], folder)
    runs = in_a_terminal(["runs"], folder)
    diffed = in_a_terminal(["diff", "1", "2"], folder)
    return folder, terminal, piped, runs, diffed


@pytest.mark.slow
def test_ids_stay_whole_and_no_line_is_padded_in_80_columns_and_in_a_pipe(swept):
    folder, (code, screen), piped, (runs_code, runs), (diff_code, diffed) = swept
    assert code == ExitCode.FINDINGS and piped.returncode == ExitCode.FINDINGS, piped.stderr
    for text, findings_file in ((screen, "first.json"), (piped.stdout, "second.json")):
        data = json.loads((folder / findings_file).read_text())
        group, example = data["groups"][0]["id"], data["groups"][0]["findings"][0]
        assert group in text and example in text, text  # whole on one line: copied into the next command as they are
        findings = len(data["findings"])
        assert f"{findings} findings in 1 group;" in text and " passed" in text, text
        lines = text.splitlines()
        assert all(len(line) <= 80 for line in lines), text
        assert [line for line in lines if line != line.rstrip()] == [], text
        assert lines[-3:] == [f"  torchsleuth repro {group}", "  torchsleuth report latest", f"  torchsleuth report --issue {group}"]
    assert runs_code == 0
    assert re.findall(r"^(\d+)  ops on cpu", runs, re.MULTILINE) == ["1", "2"], runs  # a run to a line, its id first
    # diff: a table where no word breaks, else a change to a line; ids whole either way
    assert diff_code == 0 and group in diffed and example in diffed and "1 still failing" in diffed, diffed
    narrow = in_a_pipe(["diff", "1", "2"], folder, COLUMNS="44").stdout  # too narrow for the table's words
    assert re.search(rf"^still  {group}  ", narrow, re.MULTILINE) and example in narrow, narrow
    assert all(len(line) <= 80 and line == line.rstrip() for line in diffed.splitlines()), diffed
    # the group id the summary offers is one `repro` takes
    shown = in_a_pipe(["repro", data["groups"][0]["id"]], folder)
    assert shown.returncode == 0 and f"finding {example}" in shown.stdout, shown.stderr


def test_an_output_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code = main([*SWEEP, "--json", str(tmp_path / "file" / "x.json"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE and len(err.strip().splitlines()) == 1, err
    assert "cannot write the --json file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no store: no run was recorded


def test_a_name_is_answered_from_the_cached_lists(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCHSLEUTH_CACHE", str(tmp_path))
    assert names.cached() is None
    precheck.check(["ops", "--ops", "sofmax"])  # no cache: left to the full check
    with pytest.raises(UsageError, match=r"unknown dtype 'float23' \(did you mean float32\?\)"):
        precheck.check(["ops", "--dtypes", "float23"])  # the dtypes need no cache
    precheck.remember(ops=["softmax", "log_softmax", "nn.functional.gelu"], layouts=["contiguous", "transposed"],
                      variants=["functional"], oracles=["vmap"], searches=["values"])
    with pytest.raises(UsageError, match=r"unknown op 'sofmax'; did you mean softmax, log_softmax\?"):
        precheck.check(["ops", "--dtypes", "float32", "--ops", "sofmax"])
    with pytest.raises(UsageError, match="did you mean nn.functional.gelu"):
        precheck.check(["ops", "--ops", "gelu"])
    with pytest.raises(UsageError, match=r"unknown layout 'transpose' \(did you mean transposed\?\)"):
        precheck.check(["ops", "--layouts", "transpose"])
    with pytest.raises(UsageError, match="unknown search 'valuez'"):
        precheck.check(["ops", "--search", "valuez"])
    # what it cannot judge here is left alone: globs, overloads, ops an --import may register, other commands
    for argv in (["ops", "--ops", "soft*,aten.add,myns::op,nn.functional.gelu"], ["ops", "--ops", "mine", "--import", "m.py"],
                 ["optim", "--ops", "sofmax"], ["ops", "--oracles", "none", "--search", "all"], ["ops", "--ops"]):
        precheck.check(argv)
    assert capsys.readouterr().err == ""  # a flag without its value: the full parser says so, once
    (tmp_path / next(p.name for p in tmp_path.iterdir())).write_text(json.dumps({"fingerprint": "another torchsleuth"}))
    assert names.cached() is None  # written by other code: ignored, never trusted


@pytest.mark.slow
def test_a_mistyped_op_or_a_bad_output_path_is_answered_before_torch_loads(tmp_path):
    first = in_a_pipe(["ops", "--ops", "sofmax"], tmp_path, TORCHSLEUTH_CACHE=str(tmp_path / "cache"))  # loads it, and caches the names
    assert first.returncode == ExitCode.USAGE and "did you mean softmax" in first.stderr, first.stderr
    (tmp_path / "file").write_text("")
    probe = ("import sys\nfrom torchsleuth.cli.main import main\n"
             "codes = main(['ops', '--ops', 'sofmax']), main(['optim', '--json', 'file/x.json'])\n"
             "print(*codes, 'torch' in sys.modules, 'torch.testing._internal.common_methods_invocations' in sys.modules)")
    second = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=environment(TORCHSLEUTH_CACHE=str(tmp_path / "cache")),
                            capture_output=True, text=True, timeout=120)
    assert second.stdout.split() == ["2", "2", "False", "False"], second.stderr
    typo, path = second.stderr.splitlines()
    assert typo + "\n" == first.stderr  # the same line the full check printed
    assert path == "torchsleuth optim: error: cannot write the --json file 'file/x.json': not a writable file path"


def test_a_watched_script_that_raises_shows_its_own_traceback_and_is_stored_as_failed(tmp_path, capsys, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("import torch\n\ndef step(x):\n    raise ValueError(f'bad batch {tuple(x.shape)}')\n\nstep(torch.ones(2, 3))\n")
    monkeypatch.chdir(tmp_path)
    code = main(["watch", "--invariants-only", "--out", "out", str(script), "--json", "x.json"])
    out, err = capsys.readouterr()
    assert code == ExitCode.SCRIPT_FAILED, err
    assert "warning: --json after the script" in err and "put torchsleuth's flags before the script" in err
    traceback = err[err.index("Traceback"):]
    assert f'File "{script}", line 6, in <module>' in traceback and "in step" in traceback
    assert "ValueError: bad batch (2, 3)" in traceback and "torchsleuth" not in traceback.partition("ValueError")[0]
    assert "runpy" not in traceback
    assert "the script raised ValueError: bad batch (2, 3): the run is stored as failed (exit status 3)" in err
    store = Store(tmp_path / "out" / "runs.db")
    try:
        assert ("failed", "the script raised ValueError: bad batch (2, 3)") in store.notes(1)
    finally:
        store.close()
    assert main(["runs", "--db", "out/runs.db"]) == 0 and "failed" in capsys.readouterr().out

    script.write_text("import torch\n\nprint(torch.ones(2).sum())\n")  # no optimizer step: nothing for the invariants
    code = main(["watch", "--invariants-only", "--out", "out", str(script)])
    out = capsys.readouterr().out
    assert code == ExitCode.NOTHING_CHECKED and "nothing was checked: the script made no optimizer step" in out, out


def test_the_reasons_and_never_reached_tables_fold_into_lines_without_breaking_a_word_in_80_columns():
    """A table rich would print with a word of a cell broken (a long overload, a reason naming one) is printed as lines,
    wrapped between words; at 200 columns the same rows are a table."""
    import io

    from rich.console import Console

    from torchsleuth.frame import SweepResult
    from torchsleuth.report import terminal, view
    from torchsleuth.store.coverage import Coverage, OpCoverage
    from torchsleuth.store.sqlite import RunInfo

    overload = "aten._scaled_dot_product_flash_attention_for_cpu_backward.default"
    reason = (f"RuntimeError: {overload} expected query, key and value to have the same dtype, but got "
              "query.dtype: torch.float32 key.dtype: torch.bfloat16 (raised at "
              "/home/someone/.venv/lib/python3.11/site-packages/torch/nn/functional.py:5580)")
    run = RunInfo(id=1, key="k", command="ops", device="cpu", torch="2.13.0", version="0.1.0", started=1.7e9, finished=1.7e9,
                  seconds=1.0, config={"ops": ["nn.functional.scaled_dot_product_attention"]})
    coverage = Coverage(ops=(OpCoverage(op="nn.functional.scaled_dot_product_attention", found=(overload, "aten.sdpa.default"),
                                        reached=("aten.sdpa.default",), unreached=((overload, "no backward case"),)),))
    result = SweepResult(run=run, resumed=False, statuses={"pass": 3, "raised": 2}, reasons={"raised": {reason: 2}},
                         failed_units=(), notes=(), findings=(), seconds=1.0, coverage=coverage)
    screens = {}
    for width in (80, 200):
        screen = io.StringIO()
        terminal.render(view.build(result), console=Console(file=terminal._Trimmed(screen), width=width), coverage=coverage)
        screens[width] = screen.getvalue()
    narrow = screens[80]
    assert all(word in narrow for word in reason.split()), narrow  # each word whole, the id-like overload too
    assert f"{overload} (nn.functional.scaled_dot_product_attention): no backward case" in narrow.replace("\n", " "), narrow
    assert "2 cases: RuntimeError:" in narrow and "┃" not in narrow, narrow
    assert all(len(line) <= 80 and line == line.rstrip() for line in narrow.splitlines()), narrow
    assert "┃ op" in screens[200] and "┃ cases ┃ reason" in screens[200], screens[200]  # wide enough: the tables
    assert overload in screens[200] and all(word in screens[200] for word in reason.split())


def test_a_pipe_or_a_log_gets_no_progress_bar_a_terminal_does():
    """Piped, rich would print the bar's last frame with its columns squeezed to ellipses ("18/… units 0:…")."""
    import io

    from rich.console import Console

    from torchsleuth.report.terminal import TerminalProgress

    for terminal in (False, True):
        screen = io.StringIO()
        progress = TerminalProgress(Console(file=screen, width=80, force_terminal=terminal), executor="local pool, 2 workers")
        progress.start(units=3, done=0, resumed=False)
        progress.unit_done(None)
        progress.finish()
        shown = screen.getvalue()
        assert "running on: local pool, 2 workers" in shown
        assert ("━" in shown) == terminal, shown
