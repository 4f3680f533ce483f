"""Dtypes by probing: an op is swept in the dtypes OpInfo does not declare for it, where its kernel takes them.

The op of the planted tests is ``nn.functional.embedding``: OpInfo declares it
for floating dtypes only, and its CPU kernel takes an int64 weight on torch
2.13. ``bitwise_not`` is the op whose kernel refuses a dtype (float32).
"""

from __future__ import annotations

import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases import opinfo, select
from torchsleuth.cases.layouts import contiguous_strides
from torchsleuth.cases.records import Case, Unit
from torchsleuth.cli.main import main
from torchsleuth.engine import run_case
from torchsleuth.errors import ExitCode
from torchsleuth.report import view
from torchsleuth.sweep import depth

EMBEDDING = "nn.functional.embedding"


def probed(op: str, dtype: str, **extra) -> SweepConfig:
    spec = dict(variants=("functional",), layouts=("contiguous", "transposed"), samples=3, workers=0, probe_dtypes=True) | extra
    return SweepConfig(ops=resolve_ops(op), dtypes=(dtype,), **spec)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """aten::embedding through index_select, reading a non-contiguous int64 weight as if it were contiguous."""
    if weight.dtype == torch.int64 and not weight.is_contiguous():
        weight = weight.as_strided(weight.shape, contiguous_strides(weight.shape), weight.storage_offset())
    return weight.index_select(0, indices.reshape(-1)).reshape(*indices.shape, weight.shape[-1])


def test_the_plant_is_in_a_dtype_opinfo_does_not_declare():
    assert torch.int64 not in opinfo.dtypes(opinfo.get(EMBEDDING), "cpu")


def test_units_include_undeclared_dtypes_only_when_probing():
    ops = (EMBEDDING, "bitwise_not")
    assert select.units(ops, ("int64", "float32"), "cpu") == [Unit(op=EMBEDDING, dtype="float32", device="cpu"),
                                                              Unit(op="bitwise_not", dtype="int64", device="cpu")]
    assert set(select.units(ops, ("int64", "float32"), "cpu", probe=True)) == {
        Unit(op=o, dtype=d, device="cpu") for o in ops for d in ("int64", "float32")}


def test_units_leave_out_dtypes_opinfo_makes_no_samples_in():
    # cholesky's sample function draws its matrices with a random fill bool has no kernel for
    assert torch.bool not in opinfo.dtypes(opinfo.get("cholesky"), "cpu")
    assert select.units(("cholesky",), ("bool", "float32"), "cpu", probe=True) == [Unit(op="cholesky", dtype="float32", device="cpu")]


def test_integer_bug_in_an_undeclared_dtype_is_found_and_named_with_its_dtype(plant, run_sweep):
    plant("embedding", embedding)
    result = run_sweep(probed(EMBEDDING, "int64"))
    assert result.findings, result.statuses
    for finding in result.findings:
        assert (finding.opinfo, finding.dtype, finding.kind, finding.reference) == (EMBEDDING, "int64", "mismatch", "layout")
        assert dict(finding.layouts).get("input") == "transposed"  # the weight (the indices may be laid out too)
    assert {"input": "transposed"} in [dict(f.layouts) for f in result.findings]
    assert not result.flaky  # replayed (engine.run_case) in the undeclared dtype, where it recurs
    assert ("probe", f"{EMBEDDING}|int64|cpu accepted") in result.notes


def test_the_same_run_without_the_plant_is_clean(run_sweep):
    result = run_sweep(probed(EMBEDDING, "int64"))
    assert not result.findings, result.statuses
    assert result.statuses.get("pass", 0) > 0
    assert not result.reasons.get("skip")


def test_the_same_run_without_probing_sweeps_nothing(run_sweep):
    result = run_sweep(probed(EMBEDDING, "int64", probe_dtypes=False))
    assert sum(result.statuses.values()) == 0


def test_a_dtype_the_kernel_refuses_is_one_skip_with_the_probes_reason(run_sweep):
    result = run_sweep(probed("bitwise_not", "float32", variants=("functional", "method", "inplace", "out")))
    assert result.statuses == {"skip": 1}
    [(reason, count)] = result.reasons["skip"].items()
    assert reason.startswith("the kernel refuses float32 (probe raised: NotImplementedError:") and "bitwise_not" in reason
    assert ("probe", "bitwise_not|float32|cpu refused") in result.notes


def test_replays_call_an_undeclared_dtype():
    taken = run_case(Case(op=EMBEDDING, variant="functional", dtype="int64", device="cpu", sample=0, layouts=(("input", "transposed"),)))
    assert taken.status == "pass", taken.reason
    refused = run_case(Case(op="bitwise_not", variant="functional", dtype="float32", device="cpu", sample=0))
    assert refused.status == "raised"


def test_backward_of_an_undeclared_dtype_only_when_floating_or_complex():
    assert run_case(Case(op=EMBEDDING, variant="backward", dtype="int64", device="cpu", sample=0)).status == "skip"


def test_a_deep_run_probes_unless_told_not_to():
    assert depth(SweepConfig(), deep=True).probe_dtypes
    assert not depth(SweepConfig(), deep=True, given={"probe_dtypes"}).probe_dtypes
    assert not depth(SweepConfig(), deep=False).probe_dtypes
    assert SweepConfig(probe_dtypes=True).key() != SweepConfig().key()
    assert [name for name, _ in view._settings({"probe_dtypes": True})] == ["probe dtypes"]
    assert not view._settings({"probe_dtypes": False})


def test_cli_probes_a_pointed_run_and_not_with_no_probe_dtypes(tmp_path, capsys):
    argv = ["ops", "--ops", "bitwise_not", "--dtypes", "float32", "--workers", "0", "--no-shrink", "--no-progress",
            "--search", "none", "--out", str(tmp_path)]
    assert main(argv) == ExitCode.NOTHING_CHECKED  # its one case was not judged: the kernel refuses the dtype
    out = capsys.readouterr().out
    assert "nothing was checked: its one case was skipped or raised" in out
    assert "the kernel refuses float32" in out and "1 op-and-dtype units in dtypes OpInfo does not declare: 0 swept" in " ".join(out.split())
    assert main([*argv, "--no-probe-dtypes"]) == ExitCode.USAGE
    assert "nothing to sweep" in capsys.readouterr().err


# A worker that imports this file (SweepConfig.imports) has an embedding that kills the process on an int64 weight.
CRASHING = '''
import os

import torch

from torchsleuth.drill.override import planted


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if weight.dtype == torch.int64:
        os._exit(9)
    return weight.index_select(0, indices.reshape(-1)).reshape(*indices.shape, weight.shape[-1])


library = planted("embedding", embedding)
'''


def test_a_probe_that_kills_its_worker_is_a_crash_of_that_call(tmp_path, run_sweep):
    plant = tmp_path / "crashing_embedding.py"
    plant.write_text(CRASHING)
    result = run_sweep(probed(EMBEDDING, "int64", layouts=("contiguous",), samples=1, workers=1, shrink=False, imports=(str(plant),)))
    [finding] = result.findings
    assert (finding.kind, finding.dtype, finding.variant) == ("crash", "int64", "functional")
    assert not result.failed_units


def test_every_part_of_a_split_unit_whose_dtype_the_kernel_refuses_runs_nothing_and_one_part_tells_the_skip():
    # A unit split among workers (workers.parts): the probe's case is one part's; the other parts make its call
    # unreported and run none of their own cases, which would each be `raised` in a dtype the kernel refuses.
    from torchsleuth.engine import run_unit
    from torchsleuth.workers.parts import Leaving

    config = probed("bitwise_not", "float32", variants=("functional", "method", "inplace", "out"))
    unit = Unit(op="bitwise_not", dtype="float32", device="cpu")
    events = [[event for event in run_unit(unit, config, Leaving(set(), (part, 3)))] for part in range(3)]
    outcomes = [[payload for kind, payload in part if kind == "outcome"] for part in events]
    assert sorted(len(o) for o in outcomes) == [0, 0, 1]
    [skip] = sum(outcomes, [])
    assert skip.status == "skip" and skip.reason.startswith("the kernel refuses float32")
    assert all(("note", "probe refused") in part for part in events)
