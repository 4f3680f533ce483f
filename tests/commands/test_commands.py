"""``torchsleuth repro`` and ``torchsleuth runs``, over a real stored run.

One sweep for the module: in-place ``addcmul_`` with a planted kernel that
drops its writes on a non-contiguous ``self``, loaded in this process from
``torchsleuth.drill``'s kernels, the same kernel the repro script is later run after. A
second, unfinished run is stored next to it, as a killed sweep leaves one.
The printed script is then run in fresh interpreters with and without the
plant: it must fail while the bug is there and pass on the real kernel.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from torchsleuth import SweepConfig, resolve_ops, sweep
from torchsleuth.cli.main import main
from torchsleuth.drill.kernels import addcmul_dropping_noncontiguous_writes
from torchsleuth.drill.override import planted
from torchsleuth.report.groups import of_run
from torchsleuth.store.sqlite import Store

# The planted kernel of ``torchsleuth drill``'s dropped_write class, in a fresh interpreter.
PLANT_MODULE = "torchsleuth.drill.plants.dropped_write"

# Runs a script after importing the plant module from the working directory.
WITH_PLANT = f"import runpy, sys; import {PLANT_MODULE}; runpy.run_path(sys.argv[1], run_name='__main__')"


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    folder = tmp_path_factory.mktemp("commands")
    db = folder / "runs.db"
    config = SweepConfig(ops=resolve_ops("addcmul"), dtypes=("float32",), variants=("inplace",),
                         layouts=("contiguous", "transposed"), samples=1, workers=0)
    library = planted("addcmul_", addcmul_dropping_noncontiguous_writes)  # in this process, for this sweep only
    try:
        result = sweep(config, db=str(db))
    finally:
        library._destroy()
    assert result.findings, result.statuses
    # a sweep killed before its end: started, never finished
    store = Store(db)
    try:
        store.start(SweepConfig(ops=resolve_ops("neg"), dtypes=("float32",)), torch_version="2.13.0", version="0")
    finally:
        store.close()
    store = Store(db)
    try:
        findings, _ = of_run(store, result.run.id)
    finally:
        store.close()
    return {"folder": folder, "db": str(db), "finding": findings[0], "result": result}


def cli(capsys, monkeypatch, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setenv("COLUMNS", "250")  # rich folds nothing in a wide table
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(code: int, out: str, err: str, command: str) -> str:
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"torchsleuth {command}: error: "), err
    return err


# --- repro -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_repro_prints_a_script_that_fails_with_the_bug_and_passes_without(stored, capsys, monkeypatch, tmp_path):
    finding = stored["finding"]
    code, out, err = cli(capsys, monkeypatch, "repro", finding.id, "--db", stored["db"])
    assert code == 0, err
    compile(out, "repro.py", "exec")
    assert f"finding {finding.id}" in out and "addcmul_" in out
    script = tmp_path / "repro.py"
    script.write_text(out)
    runs = {
        "with the plant": subprocess.Popen([sys.executable, "-c", WITH_PLANT, str(script)], cwd=stored["folder"],
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
        "on the real kernel": subprocess.Popen([sys.executable, str(script)], cwd=tmp_path,
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
    }
    done = {name: (process.communicate(timeout=120)[0], process.returncode) for name, process in runs.items()}
    assert done["with the plant"][1] == 1, done["with the plant"][0]
    assert done["on the real kernel"][1] == 0, done["on the real kernel"][0]


def test_repro_writes_to_a_file_or_into_a_folder_and_says_where(stored, capsys, monkeypatch, tmp_path):
    finding = stored["finding"]
    code, printed, _ = cli(capsys, monkeypatch, "repro", finding.id, "--db", stored["db"])
    target = tmp_path / "bug.py"
    code, out, err = cli(capsys, monkeypatch, "repro", finding.id, "--db", stored["db"], "-o", str(target))
    assert code == 0, err
    assert target.read_text() == printed
    assert f"written to {target}" in out and f"python {target}" in out
    code, out, _ = cli(capsys, monkeypatch, "repro", finding.id, "--db", stored["db"], "-o", str(tmp_path))
    assert code == 0 and (tmp_path / f"{finding.id}.py").read_text() == printed
    assert str(tmp_path / f"{finding.id}.py") in out


@pytest.mark.parametrize("typed", ["truncated", "mistyped"])
def test_an_unknown_finding_id_suggests_the_close_ones(stored, typed, capsys, monkeypatch):
    real = stored["finding"].id
    wrong = real[:-2] if typed == "truncated" else real[:-1] + ("0" if real[-1] != "0" else "1")
    err = one_line_error(*cli(capsys, monkeypatch, "repro", wrong, "--db", stored["db"]), "repro")
    assert f"no finding {wrong!r} in {stored['db']}" in err and "did you mean" in err and real in err


def test_repro_bad_input_is_one_line_exit_2(stored, capsys, monkeypatch, tmp_path):
    finding = stored["finding"].id
    err = one_line_error(*cli(capsys, monkeypatch, "repro", finding, "--db", str(tmp_path / "none.db")), "repro")
    assert "no database at" in err
    err = one_line_error(*cli(capsys, monkeypatch, "repro", finding, "--db", stored["db"], "-o", str(tmp_path / "no" / "x.py")), "repro")
    assert "cannot write the script to" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --- runs --------------------------------------------------------------------------------------


def test_runs_lists_each_run_with_its_counts_and_the_unfinished_one(stored, capsys, monkeypatch):
    result = stored["result"]
    code, out, err = cli(capsys, monkeypatch, "runs", "--db", stored["db"])
    assert code == 0, err
    assert f"2 runs in {stored['db']}" in out
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[1:-1]]
            for line in out.splitlines() if line.startswith("│")}
    assert set(rows) == {"1", "2"}, out
    first, second = rows["1"], rows["2"]
    assert first[:4] == ["1", "ops", "cpu", result.run.torch]
    assert first[5] != "unfinished" and first[6:8] == [str(result.cases), str(len(stored["result"].findings) + len(result.flaky))]
    assert first[9] == "addcmul"
    assert second[5] == "unfinished" and second[6:8] == ["0", "0"] and second[9] == "neg"


def test_runs_of_an_empty_database_says_so(capsys, monkeypatch, tmp_path):
    Store(tmp_path / "empty.db").close()
    code, out, _ = cli(capsys, monkeypatch, "runs", "--db", str(tmp_path / "empty.db"))
    assert code == 0 and f"no runs in {tmp_path / 'empty.db'} yet" in out


@pytest.mark.parametrize("what", ["missing", "not a database"])
def test_runs_bad_database_is_one_line_exit_2(what, capsys, monkeypatch, tmp_path):
    path = tmp_path / "runs.db"
    if what == "not a database":
        path.write_text("id,command\n1,ops\n")
    err = one_line_error(*cli(capsys, monkeypatch, "runs", "--db", str(path)), "runs")
    assert ("no database at" if what == "missing" else "is not a torchsleuth database") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if what == "missing" else ["runs.db"])


@pytest.mark.parametrize("command", ["repro", "runs"])
def test_help_teaches_with_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and f"torchsleuth {command}" in text and "FILE:ID" in text
