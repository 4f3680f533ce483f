"""The ``capability`` oracle: a kernel wrong under one CPU instruction set is found, named and reproduced.

The plants are .py files written here and loaded through ``SweepConfig.imports``
(as ``--import`` does), so they live only in the sweep's spawned worker and in
the peer processes the oracle starts, never in this process. Each reads
``torch.backends.cpu.get_cpu_capability()`` and goes wrong under ``TARGET``
only, the capability just below this machine's best (avx2 where the CPU has
AVX-512, default where AVX2 is its best); the worker itself runs the best one.
A sweep without plants must stay clean.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cli.main import main
from torchsleuth.errors import UsageError
from torchsleuth.judge.plugin import decode_detail
from torchsleuth.oracles.capability import oracle as capability
from torchsleuth.oracles.capability.detail import Detail
from torchsleuth.report import repro

pytestmark = pytest.mark.skipif(len(capability.supported()) < 2, reason="needs an x86 CPU with AVX2: two capabilities to compare")

# The capability the plants go wrong under: the one below the best, which the worker runs (and so stays right).
SUPPORTED = capability.supported()
TARGET = SUPPORTED[-2] if len(SUPPORTED) >= 2 else "avx2"
BEST = SUPPORTED[-1]

HEAD = '''
import os
import warnings

import torch

_lib = torch.library.Library("aten", "IMPL")


def _plant(name, kernel):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _lib.impl(name, kernel, "CPU")


def _target():
    return torch.backends.cpu.get_cpu_capability() == TARGET
'''.replace("TARGET", repr(TARGET.upper()))

# neg is off by one in float32 under TARGET only (a vector-path bug); abs stays right.
WRONG_UNDER_TARGET = HEAD + '''
def _neg(x):
    result = torch.ops.aten.mul.Tensor(x, -1)
    return result + 1 if _target() and x.dtype == torch.float32 else result
_plant("neg", _neg)
'''

# exp kills its process under TARGET only.
CRASH_UNDER_TARGET = HEAD + '''
def _exp(x):
    if _target():
        os.abort()
    return torch.ops.aten.exp2.default(x * 1.4426950408889634)
_plant("exp", _exp)
'''


def config(plant_path=None, *, ops="neg,abs", **extra) -> SweepConfig:
    spec = dict(dtypes=("float32",), variants=("functional", "backward"), layouts=("contiguous",), samples=2,
                workers=1, oracles=("capability",), imports=(str(plant_path),) if plant_path else ()) | extra
    return SweepConfig(ops=resolve_ops(ops), **spec)


def listing(result) -> str:
    lines = [f"statuses {result.statuses}; reasons {result.reasons}; flaky {[f.summary for f in result.flaky]}"]
    lines += [f"  {f.kind} {f.op} {f.variant} {f.reference} {f.case_id}: {f.summary}" for f in result.findings]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def planted_sweep(tmp_path_factory):
    """One sweep of neg (planted) and abs (clean) with every capability, shrinking included."""
    folder = tmp_path_factory.mktemp("capability")
    plant = folder / "plant_target.py"
    plant.write_text(WRONG_UNDER_TARGET)
    from torchsleuth import sweep

    return sweep(config(plant), db=str(folder / "runs.db")), folder


# --- choosing capabilities ------------------------------------------------------------------------


def test_all_and_empty_mean_every_supported_capability():
    assert capability.resolve(None) == capability.resolve("all") == capability.supported()
    assert capability.resolve("AVX2, default") == ("default", "avx2")  # lowest first, case-insensitive


@pytest.mark.parametrize("text, words", [
    ("avx9", ["unknown CPU capability 'avx9'", "known: default, avx2, avx512"]),
    ("avx2", ["compares two capabilities or more", "avx2 alone"]),
])
def test_bad_capabilities_are_usage_errors(text, words):
    with pytest.raises(UsageError) as caught:
        capability.resolve(text)
    for word in words:
        assert word in str(caught.value)


def test_a_capability_this_cpu_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(capability, "supported", lambda: ("default", "avx2"))
    with pytest.raises(UsageError, match="does not support the avx512 capability; it supports default, avx2"):
        capability.resolve("default,avx512")


@pytest.mark.parametrize("argv, words", [
    (["--cpu-capabilities", "avx9"], ["unknown CPU capability 'avx9'"]),
    (["--cpu-capabilities", "default"], ["compares two capabilities or more"]),
])
def test_cli_refuses_bad_capabilities_in_one_line_with_exit_2(argv, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["ops", "--ops", "neg", "--dtypes", "float32", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(word in err[0] for word in words), err
    assert list(tmp_path.iterdir()) == []


def test_plan_names_the_capabilities_and_only_on_the_cpu():
    from torchsleuth.cases.records import Unit

    cpu = Unit(op="neg", dtype="float32", device="cpu")
    assert capability.plan(cpu, "functional", 0, "avx2,default") == ["capability:default,avx2"]
    assert capability.plan(cpu, "backward", 0, "avx2,default") == ["capability:default,avx2"]
    assert capability.plan(cpu, "functional", 0) == ["capability:" + ",".join(capability.supported())]
    assert capability.plan(cpu, "inplace", 0) == []
    assert capability.plan(Unit(op="neg", dtype="float32", device="cuda"), "functional", 0) == []


# --- the planted bug -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_kernel_wrong_under_one_capability_only_is_found_and_named(planted_sweep):
    result, _ = planted_sweep
    assert result.findings, listing(result)
    everything = ",".join(capability.supported())
    for f in result.findings:
        assert (f.kind, f.reference, f.op, f.opinfo, f.dtype) == ("capability_mismatch", "capability", "aten.neg.default", "neg", "float32"), listing(result)
        assert f.case_id.endswith(f"|@capability:{everything}")
        assert f"ATEN_CPU_CAPABILITY={TARGET}" in f.summary and f.mismatch.path.endswith(f"under {TARGET}"), f.summary
        assert f.mismatch.attribute == "values" and f.mismatch.max_abs_err == pytest.approx(1.0)
    assert {f.variant for f in result.findings} == {"functional", "backward"}  # neg's backward is neg
    assert not result.flaky and not result.failed_units, listing(result)
    for f in result.findings:
        assert result.shrunk[f.id].status == "shrunk", result.shrunk[f.id]
        assert f"ATEN_CPU_CAPABILITY={TARGET}" in result.reported(f).summary


@pytest.mark.slow
def test_the_clean_op_beside_it_passes_with_a_tally(planted_sweep):
    result, folder = planted_sweep
    from torchsleuth.store.sqlite import Store

    store = Store(str(folder / "runs.db"))
    try:
        rows = store.outcome_rows(result.run.id)
    finally:
        store.close()
    deep = {case_id: (status, reason) for case_id, status, reason, _ in rows if "|@capability" in case_id}
    clean = {case_id: v for case_id, v in deep.items() if case_id.startswith("abs|")}
    assert {c.split("|")[1] for c in clean} == {"functional", "backward"}, deep
    for status, reason in clean.values():
        assert status == "pass", reason
        assert reason.startswith(f"compared with {BEST}: ") and all(f"{c} " in reason for c in SUPPORTED[:-1]), reason
    assert not [f for f in result.findings if f.opinfo == "abs"], listing(result)
    assert "error" not in result.statuses, listing(result)


@pytest.mark.slow
def test_the_finding_carries_what_was_compared_and_its_script_reads_only_that(planted_sweep):
    result, folder = planted_sweep
    finding = result.reported(next(f for f in result.findings if f.variant == "functional"))
    detail = decode_detail(Detail, finding)
    assert detail.capabilities == capability.supported() and detail.reference == capability.supported()[-1], detail
    assert detail.worker == capability.supported()[-1] and detail.threads >= 1, detail
    assert detail.imports == (str(folder / "plant_target.py"),), detail
    assert repro.script(dataclasses.replace(finding, detail="")) == repro.script(finding)  # the prose is never read back
    stored_before_records = repro.script(dataclasses.replace(finding, data=""))
    assert "sys.exit(2)" in stored_before_records and "no record of the capabilities compared" in stored_before_records


@pytest.mark.slow
def test_repro_fails_with_the_plant_and_passes_without(planted_sweep, tmp_path):
    """Written from the finding's Detail record alone: its prose blanked."""
    result, folder = planted_sweep
    finding = result.reported(next(f for f in result.findings if f.variant == "functional"))
    text = repro.script(dataclasses.replace(finding, detail=""))
    assert f"IMPORTS = ({str(folder / 'plant_target.py')!r},)" in text
    planted = tmp_path / "planted.py"
    planted.write_text(text)
    clean = tmp_path / "clean.py"
    clean.write_text(text.replace(f"IMPORTS = ({str(folder / 'plant_target.py')!r},)", "IMPORTS = ()"))
    runs = {name: subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
            for name, path in (("planted", planted), ("clean", clean))}
    assert runs["planted"].returncode == 1, runs["planted"].stdout + runs["planted"].stderr
    assert f"under {TARGET}" in runs["planted"].stdout, runs["planted"].stdout
    assert runs["clean"].returncode == 0, runs["clean"].stdout + runs["clean"].stderr
    assert "OK: every capability agrees" in runs["clean"].stdout


# --- selection, crashes, and clean ops ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(len(SUPPORTED) < 3, reason="needs three capabilities: the planted one left out, two compared")
def test_capabilities_left_out_are_not_run(tmp_path, monkeypatch, run_sweep):
    plant = tmp_path / "plant_target.py"
    plant.write_text(WRONG_UNDER_TARGET)
    chosen = f"capability:{SUPPORTED[0]},{BEST}"
    result = run_sweep(config(plant, ops="neg", variants=("functional",), samples=1, shrink=False, oracles=(chosen,)))
    assert result.findings == () and result.statuses.get("pass", 0) >= 2, listing(result)


@pytest.mark.slow
def test_a_kernel_that_kills_its_process_under_one_capability_is_a_finding(tmp_path, monkeypatch, run_sweep):
    plant = tmp_path / "crash_target.py"
    plant.write_text(CRASH_UNDER_TARGET)
    chosen = f"capability:{TARGET},{BEST}"
    result = run_sweep(config(plant, ops="exp", variants=("functional",), samples=1, shrink=False, oracles=(chosen,)))
    crashed = [f for f in result.findings if f.reference == "capability"]
    assert len(crashed) == 1, listing(result)
    assert f"kills its process under ATEN_CPU_CAPABILITY={TARGET}" in crashed[0].summary
    assert "SIGABRT" in crashed[0].mismatch.actual
    assert "error" not in result.statuses, listing(result)


@pytest.mark.slow
def test_clean_kernels_stay_clean(run_sweep):
    result = run_sweep(config(ops="abs,exp,add,sum,softmax", dtypes=("float32", "bfloat16"), workers=0, shrink=False))
    assert result.findings == (), listing(result)
    assert result.statuses.get("pass", 0) > 0 and "error" not in result.statuses, listing(result)


def test_lazily_conjugated_complex_results_are_compared(run_sweep):
    """conj and H return a conjugate view; its classes are read from the resolved values, not refused."""
    result = run_sweep(config(ops="conj,H", dtypes=("complex64",), variants=("functional",), samples=1, workers=0, shrink=False))
    assert result.findings == (), listing(result)
    assert result.statuses.get("pass", 0) >= 2 and "error" not in result.statuses, listing(result)
