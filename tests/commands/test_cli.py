"""The ``torchsleuth`` command, run as a user runs it: a fresh interpreter, exit status, stdout/stderr, files.

Every sweep here is one op in one dtype with one sample, so that each run takes
seconds. Most of a run is the start-up of torch, so the runs are started a few
at a time, each in a folder of its own (``QUICK`` and ``SWEEPS``), and the tests
read their results. Every kind of bad input is also tried in this process
through ``cli.main.main(argv)``, which is what the console script calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from torchsleuth._version import __version__
from torchsleuth.cases.records import LAYOUTS, VARIANTS
from torchsleuth.cli.main import main
from torchsleuth.dtypes import NAMES as DTYPE_NAMES

SMALL = ["--ops", "addcmul", "--dtypes", "float32", "--samples", "1", "--workers", "1", "--no-progress", "--no-compile"]
TIMEOUT = 300

# A bad kernel for every worker that imports this file (--import as a .py file):
# torchsleuth drill's dropped_write plant, in-place addcmul_ dropping its write
# when self is not contiguous.
PLANT = "from torchsleuth.drill.plants.dropped_write import library  # noqa: F401\n"


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "torchsleuth.cli.main", *args]


def environment() -> dict[str, str]:
    # a wide terminal, so that rich does not fold names in tables
    return {**os.environ, "COLUMNS": "200"}


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def strict_json(path: Path):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


@dataclass(frozen=True)
class Run:
    result: subprocess.CompletedProcess
    folder: Path
    before: set[str]  # the files in the folder before the run

    @property
    def wrote(self) -> set[str]:
        return files_under(self.folder) - self.before


def run_all(commands: dict[str, list[str]], tmp_path_factory) -> dict[str, Run]:
    """Each command in a fresh folder holding a regular file ``a-file`` and ``plant.py``; a few at a time."""
    folders = {}
    for name in commands:
        folder = tmp_path_factory.mktemp("cli")
        (folder / "a-file").write_text("a regular file\n")
        (folder / "plant.py").write_text(PLANT)
        folders[name] = (folder, files_under(folder))

    def one(name):
        return subprocess.run(commands[name], cwd=folders[name][0], capture_output=True, text=True, timeout=TIMEOUT, env=environment())

    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 1))) as pool:
        futures = {name: pool.submit(one, name) for name in commands}
        return {name: Run(future.result(), *folders[name]) for name, future in futures.items()}


# --- bad input and other quick runs -----------------------------------------------------
#
# name: (arguments, what stderr must say). Each must exit 2 with one line on
# stderr and write nothing. Arguments after SMALL win (argparse keeps the last).

BAD_INPUT = {
    "unknown op": (["ops", *SMALL, "--ops", "addcmull"], ["unknown op", "'addcmull'", "addcmul"]),
    # a torch function's own name: the catalog's name that holds it, cut after it (pad's variants come with it)
    "op by its function's name": (["ops", *SMALL, "--ops", "gelu"], ["unknown op", "'gelu'", "did you mean nn.functional.gelu?"]),
    "op family by its function's name": (["ops", *SMALL, "--ops", "pad"], ["'pad'", "did you mean nn.functional.pad?"]),
    "device torch lacks": (["ops", *SMALL, "--device", "cuda"], ["'cuda'", "not available", "available: cpu"]),
    "device index torch lacks": (["ops", *SMALL, "--device", "cuda:3"], ["'cuda:3'", "not available", "cpu"]),
    "malformed device": (["ops", *SMALL, "--device", "gpu0"], ["unknown device", "'gpu0'", "cpu"]),
    "unknown layout": (["ops", *SMALL, "--layouts", "contiguous,transposd"],
                       ["unknown layout", "'transposd'", "did you mean transposed", *LAYOUTS]),
    "unknown dtype": (["ops", *SMALL, "--dtypes", "float33"], ["unknown dtype", "'float33'", *DTYPE_NAMES]),
    "unknown variant": (["ops", *SMALL, "--variants", "functional,bogus"], ["unknown variant", "'bogus'", *VARIANTS]),
    "db under a regular file": (["ops", *SMALL, "--db", "a-file/runs.db"], ["a-file/runs.db", "--db", "writable"]),
    "db in /proc": (["ops", *SMALL, "--db", "/proc/torchsleuth-test/runs.db"], ["/proc/torchsleuth-test/runs.db", "--db"]),
    "db is not a database": (["ops", *SMALL, "--db", "a-file"], ["'a-file'", "--db"]),
    "out under a regular file": (["ops", *SMALL, "--out", "a-file/out"], ["a-file/out", "writable"]),
    "missing import file": (["ops", *SMALL, "--import", "no_such_plant.py"], ["--import", "no_such_plant.py", "no such file"]),
    "negative samples": (["ops", *SMALL, "--samples", "-1"], ["--samples", "'-1'", ">= 0"]),
    "non-numeric samples": (["ops", *SMALL, "--samples", "three"], ["--samples", "'three'", ">= 0"]),
    "negative workers": (["ops", *SMALL, "--workers", "-2"], ["--workers", "'-2'", ">= 0"]),
    "non-numeric timeout": (["ops", *SMALL, "--timeout", "abc"], ["--timeout", "'abc'", "seconds"]),
    "zero timeout": (["ops", *SMALL, "--timeout", "0"], ["--timeout", "'0'", "> 0"]),
    "unknown option": (["ops", *SMALL, "--opps", "sum"], ["--opps"]),
    "unknown oracle": (["ops", *SMALL, "--oracles", "sizez"], ["unknown oracle 'sizez'", "did you mean sizes", "alias"]),
    "unknown cpu capability": (["ops", *SMALL, "--cpu-capabilities", "avx9"], ["unknown CPU capability 'avx9'", "default"]),
    "unknown command": (["sweep-everything"], ["'sweep-everything'", "ops"]),
    # what a newcomer types: the Python API's name as a command, watch without its script, a report before any sweep
    "check as a command": (["check"], ["check is no command", "torchsleuth.check(op, samples)", "torchsleuth_check",
                                       "torchsleuth ops --ops NAME"]),
    "watch without its script": (["watch"], ["the following arguments are required: SCRIPT;"]),
    "report before any sweep": (["report"], ["no database at 'torchsleuth-out/runs.db'", "or sweep first"]),
}


# The kinds of bad input also tried in a fresh interpreter: each early exit path once.
IN_A_FRESH_INTERPRETER = ("unknown op", "malformed device", "db under a regular file", "negative samples", "unknown command")

CONSOLE_SCRIPT = Path(sys.executable).with_name("torchsleuth")

QUICK = {
    **{f"bad: {name}": command(*BAD_INPUT[name][0]) for name in IN_A_FRESH_INTERPRETER},
    "ops --help": command("ops", "--help"),
    "--help": command("--help"),
    # through the console script where it is installed, as users run it
    "--version": [str(CONSOLE_SCRIPT), "--version"] if CONSOLE_SCRIPT.exists() else command("--version"),
    "no command": command(),
    "list": command("ops", "--ops", "addc*,sum", "--list"),
}


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> dict[str, Run]:
    return run_all(QUICK, tmp_path_factory)


def check_bad_input(name: str, returncode, stdout: str, stderr: str) -> None:
    if name.startswith("device") and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    _, fragments = BAD_INPUT[name]
    lines = stderr.strip().splitlines()
    assert returncode == 2, stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("torchsleuth"), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert stdout == ""


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(name, tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("a regular file\n")
    monkeypatch.chdir(tmp_path)
    try:
        returncode = main(BAD_INPUT[name][0])
    except SystemExit as e:  # argparse's errors
        returncode = e.code
    captured = capsys.readouterr()
    check_bad_input(name, returncode, captured.out, captured.err)
    assert files_under(tmp_path) == {"a-file"}
    assert (tmp_path / "a-file").read_text() == "a regular file\n"


@pytest.mark.slow
@pytest.mark.parametrize("name", IN_A_FRESH_INTERPRETER)
def test_bad_input_from_the_command_line(name, quick):
    run = quick[f"bad: {name}"]
    check_bad_input(name, run.result.returncode, run.result.stdout, run.result.stderr)
    assert run.wrote == set()


# --- help ----------------------------------------------------------------------------------


def test_all_oracles_are_every_one_but_the_large_probes():
    from torchsleuth.judge.plugin import BUILTIN
    from torchsleuth.cases import select

    assert select.resolve_oracles("all", BUILTIN) == tuple(name for name in BUILTIN.names() if name != "large")
    assert select.resolve_oracles("large, sizes", BUILTIN) == ("large", "sizes") and select.resolve_oracles(None, BUILTIN) == ()


@pytest.mark.parametrize("value, oracle", [("all", "large"), ("rows,index", "large:rows,index"), ("length", "large:length")])
def test_large_takes_the_forms_to_probe(value, oracle):
    import argparse

    from torchsleuth.cli import ops

    args = argparse.Namespace(compile=False, large=value, cpu_capabilities=None)
    assert ops._deep_flags(args, (), "cpu") == (oracle,)


@pytest.mark.parametrize("depth, compiled", [("deep", ("compile", "compile:sampled")), ("catalog", ("compile:catalog",))])
def test_compile_is_in_full_pointed_and_within_the_budget_in_a_catalog_run(depth, compiled, tmp_path, monkeypatch):
    from torchsleuth.cli import ops

    handed = []
    monkeypatch.setattr(ops, "finish", lambda config, **_: handed.append(config) or 0)
    monkeypatch.chdir(tmp_path)
    assert main(["ops", "--ops", "exp", "--depth", depth, "--compile", "--workers", "0"]) == 0
    assert tuple(o for o in handed[0].oracles if o.startswith("compile")) == compiled
    assert main(["ops", "--ops", "exp", "--depth", depth, "--no-compile", "--workers", "0"]) == 0
    assert not [o for o in handed[1].oracles if o.startswith("compile")]


def test_an_unknown_large_form_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from torchsleuth.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["ops", "--ops", "softmax", "--large", "rows,bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown --large form 'bogus'; known: elements, length, rows, span, index, creation" in err[0], err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ops_help_lists_every_layout_and_variant(quick):
    result = quick["ops --help"].result
    assert result.returncode == 0, result.stderr
    text = result.stdout
    listed = text[text.index("layouts (--layouts"):]
    for layout in LAYOUTS:
        assert f"\n  {layout} " in listed, layout
    variants_line = next(line for line in text.splitlines() if line.startswith("variants"))
    for variant in VARIANTS:
        assert variant in variants_line, variant
    for option in ("--ops", "--device", "--dtypes", "--layouts", "--variants", "--samples", "--workers", "--timeout", "--import", "--out",
                   "--db", "--json", "--list"):
        assert option in text, option
    assert quick["ops --help"].wrote == set()


def test_every_help_reads_plainly_and_the_top_one_says_where_to_start(capsys):
    """No docstring markup (``code``) in any command's --help, each with its examples; the top one names first commands
    and the Python API."""
    for command in ("ops", "watch", "optim", "shard", "report", "diff", "repro", "runs", "drill"):
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        out = capsys.readouterr().out
        assert done.value.code == 0 and "``" not in out and "\nexamples:" in out, out
        assert f"`torchsleuth {command}`" in out, out  # the module's docstring, its markup made plain
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "start with:\n  torchsleuth ops --ops nn.functional.gelu" in out and "torchsleuth.check(op, samples)" in out, out


@pytest.mark.slow
def test_top_level_help_and_version(quick):
    result = quick["--help"].result
    assert result.returncode == 0, result.stderr
    assert "ops" in result.stdout and "exit status" in result.stdout
    result = quick["--version"].result
    assert result.returncode == 0 and result.stdout.strip() == f"torchsleuth {__version__}"


@pytest.mark.slow
def test_no_command_exits_2_with_help(quick):
    run = quick["no command"]
    assert run.result.returncode == 2
    assert "usage: torchsleuth" in run.result.stdout + run.result.stderr
    assert "ops" in run.result.stdout + run.result.stderr
    assert run.wrote == set()


# --- --list --------------------------------------------------------------------------------


@pytest.mark.slow
def test_list_prints_the_selected_ops_and_writes_nothing(quick):
    run = quick["list"]
    assert run.result.returncode == 0, run.result.stderr
    rows = {line.split("│")[1].strip(): line for line in run.result.stdout.splitlines() if line.count("│") > 2}
    assert {"addcdiv", "addcmul", "sum"} <= set(rows)
    assert not {"add", "addmm", "addcmul_", "sub"} & set(rows)
    assert "3 ops" in run.result.stdout
    assert "inplace" in rows["addcmul"] and "float32" in rows["addcmul"]
    assert "inplace" not in rows["sum"]  # sum has no in-place variant
    assert run.wrote == set()


# --- end to end ----------------------------------------------------------------------------

TOP_LEVEL = {"tool", "version", "torch", "command", "device", "cases", "seconds", "findings", "groups"}
FINDING = {"id", "op", "kind", "variant", "dtype", "device", "reference", "args", "max_abs_err", "tolerance", "summary", "group", "repro"}


SWEEPS = {
    "clean": command("ops", *SMALL, "--out", "out", "--json", "findings.json"),
    "planted": command("ops", *SMALL, "--variants", "inplace,functional", "--layouts", "transposed,strided",
                       "--import", "plant.py", "--out", "out", "--json", "out/findings.json"),
    "unwritable json": command("ops", *SMALL, "--workers", "0", "--variants", "functional", "--layouts", "contiguous",
                               "--json", "a-file/findings.json"),
    "unimportable module": command("ops", *SMALL, "--variants", "functional", "--layouts", "contiguous",
                                   "--import", "no_such_module_for_torchsleuth"),
}


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> dict[str, Run]:
    return run_all(SWEEPS, tmp_path_factory)


@pytest.mark.slow
def test_clean_sweep_exits_0_with_a_summary_and_the_findings_file(sweeps):
    run = sweeps["clean"]
    result, folder = run.result, run.folder
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no findings" in result.stdout
    assert f"torch {torch.__version__}" in result.stdout
    data = strict_json(folder / "findings.json")
    assert set(data) >= TOP_LEVEL
    assert (data["tool"], data["version"], data["torch"], data["command"], data["device"]) == (
        "torchsleuth", __version__, torch.__version__, "ops", "cpu")
    assert isinstance(data["cases"], int) and data["cases"] > 10
    assert isinstance(data["seconds"], float) and data["seconds"] > 0
    assert data["findings"] == [] and data["groups"] == []
    assert f"{data['cases']} cases" in result.stdout
    assert (folder / "out" / "runs.db").is_file()
    assert not (folder / "out" / "repros").exists()


@pytest.mark.slow
def test_planted_bug_exits_1_with_a_dropped_write_and_a_repro(sweeps):
    result, folder = sweeps["planted"].result, sweeps["planted"].folder
    assert result.returncode == 1, result.stdout + result.stderr
    assert "dropped_write" in result.stdout and "addcmul_" in result.stdout
    data = strict_json(folder / "out" / "findings.json")
    assert set(data) >= TOP_LEVEL
    assert data["findings"], data
    for finding in data["findings"]:
        assert set(finding) >= FINDING
        assert (finding["op"], finding["kind"], finding["variant"], finding["dtype"], finding["device"]) == (
            "aten.addcmul_.default", "dropped_write", "inplace", "float32", "cpu")
        self_arg = finding["args"][0]
        assert self_arg["layout"] in ("transposed", "strided")
        assert len(self_arg["shape"]) == len(self_arg["stride"]) and self_arg["storage_offset"] == 0
        # null where the error is not a number (a NaN expected where the dropped write left 0: value=inf)
        assert (finding["max_abs_err"] is None or finding["max_abs_err"] > 0) and set(finding["tolerance"]) == {"atol", "rtol"}
        assert finding["group"] in {g["id"] for g in data["groups"]}
        # the repro path is relative to the findings file's folder and is a script there
        script = folder / "out" / finding["repro"]
        assert script.is_file() and script.suffix == ".py"
        assert (folder / "out" / "repros") in script.parents
        assert finding["id"] in script.read_text()
    # the functional variant is fine: every finding is the in-place one
    assert {f["variant"] for f in data["findings"]} == {"inplace"}
    assert sorted(i for g in data["groups"] for i in g["findings"]) == sorted(f["id"] for f in data["findings"])


@pytest.mark.slow
def test_repros_land_in_out_repros(sweeps):
    folder = sweeps["planted"].folder
    data = strict_json(folder / "out" / "findings.json")
    for finding in data["findings"]:
        assert finding["repro"] == f"repros/{finding['id']}.py"
        assert (folder / "out" / "repros" / f"{finding['id']}.py").is_file()


@pytest.mark.slow
def test_unwritable_json_path_is_refused_before_sweeping(sweeps):
    run = sweeps["unwritable json"]
    assert run.result.returncode == 2, run.result.stderr
    assert len(run.result.stderr.strip().splitlines()) == 1, run.result.stderr
    assert run.wrote == set()


@pytest.mark.slow
def test_unimportable_module_is_an_environment_error(sweeps):
    run = sweeps["unimportable module"]
    assert run.result.returncode == 2, run.result.stdout + run.result.stderr
    assert "no_such_module_for_torchsleuth" in run.result.stderr
