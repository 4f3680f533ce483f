"""The ``repeat`` oracle: a number changed between two calls must not be ignored.

Planted: a dispatch cache that memoises hardtanh's result keyed on the
tensor but not on min_val and max_val (B is served A's result), and one that
hands out the previous call's result (A again is served B's), and an exp
memoised with the dtype left out of the key (B in float64 is served A's
float32 result). Each must be found, named (op, the number or dtype, both
values), shrunk without turning flaky, and its repro script must exit 1 with
the plant and 0 without. Real kernels stay clean.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from conftest import run_with_and_without, script_main
from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case, Unit
from torchsleuth.drill.override import override
from torchsleuth.engine import run_case, run_unit
from torchsleuth.judge import calls
from torchsleuth.judge.plugin import decode_detail
from torchsleuth.oracles.repeat import plan as repeat
from torchsleuth.oracles.repeat.detail import AGAIN, DTYPES, STALE, Change, Detail
from torchsleuth.report import repro

MEMO_PLANT = '''
import warnings
import torch

_lib = torch.library.Library("aten", "IMPL")
_memo = {}


def _hardtanh(self, min_val=-1, max_val=1):
    # the bug: min_val and max_val are not in the key
    key = (self.dtype, tuple(self.shape), self.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    if key not in _memo:
        _memo[key] = torch.clamp(self, min_val, max_val)
    return _memo[key]


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("hardtanh", _hardtanh, "CPU")
'''


def _key(t: torch.Tensor):
    """A tensor's dtype, shape and bytes: what a cache of results keyed on the tensor keys on."""
    return t.dtype, tuple(t.shape), t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


def memoising_hardtanh():
    memo = {}

    def hardtanh(self, min_val=-1, max_val=1):
        key = _key(self)  # the bug: min_val and max_val are not part of the key
        if key not in memo:
            memo[key] = torch.clamp(self, min_val, max_val)
        return memo[key]

    return hardtanh


def lagging_hardtanh():
    """Hands out the result of the previous call on the same tensor (a double buffer swapped late)."""
    previous = {}

    def hardtanh(self, min_val=-1, max_val=1):
        fresh = torch.clamp(self, min_val, max_val)
        key = _key(self)
        stale = previous.get(key, fresh)
        previous[key] = fresh
        return stale.clone()

    return hardtanh


def sweep_config(ops: str, **extra) -> SweepConfig:
    spec = dict(dtypes=("float32",), variants=("functional", "inplace"), layouts=("contiguous",), samples=3, workers=0, oracles=("repeat",)) | extra
    return SweepConfig(ops=resolve_ops(ops), **spec)


def stale(result):
    return [f for f in result.findings if f.kind == "stale_result"]


def deep_outcomes(op: str, dtype: str, **extra):
    events = run_unit(Unit(op=op, dtype=dtype, device="cpu"), sweep_config(op, dtypes=(dtype,), **extra))
    return [o for kind, o in events if kind == "outcome" and o.case.oracle.startswith("repeat")]


# --- planning -------------------------------------------------------------------------------


def test_numbers_are_the_samples_python_numbers_and_bools_and_each_gets_another_value():
    t = torch.ones(2)
    assert repeat.numbers((t, 2, 0.5, None, "x"), {"alpha": 3, "keepdim": True, "out": t}) == [
        ("args[1]", 2), ("args[2]", 0.5), ("alpha", 3), ("keepdim", True)]
    assert [repeat.changed(v) for v in (True, 3, 0, -1, 0.5, 0.0, -math.inf, 2j)] == [False, 2, 1, 0, 0.25, 0.5, -1.0, 1j]
    names = ("repeat:alpha=0.5", "repeat:args[1]=-3", "repeat:keepdim=False", "repeat:p=inf", "repeat:x=(1+2j)", "repeat:dtype=float64")
    for name in names:
        assert Change.parse(name).oracle_name() == name
    assert Change.parse("repeat:p=-inf") == Change(argument="p", number=-math.inf)
    assert Change.parse("repeat:dtype=float64") == Change(dtype="float64")


def test_a_case_is_planned_per_number_and_one_for_another_dtype_for_functional_and_inplace_variants_only():
    unit = Unit(op="add", dtype="float32", device="cpu")
    assert repeat.plan(unit, "functional", 10) == ["repeat:alpha=-1.5625", "repeat:dtype=float64"]
    assert repeat.plan(unit, "inplace", 9) == ["repeat:alpha=1", "repeat:dtype=float64"]
    assert repeat.plan(unit, "out", 10) == [] and repeat.plan(unit, "functional", 0) == ["repeat:dtype=float64"]  # no number in sample 0
    assert repeat.plan(Unit(op="add", dtype="bool", device="cpu"), "functional", 0) == []  # no other dtype for bool


EXP_PLANT = '''
import math
import warnings
import torch

_lib = torch.library.Library("aten", "IMPL")
_memo = {}


def _exp(self):
    key = (tuple(self.shape), tuple(self.detach().double().reshape(-1).tolist()))  # the bug: the dtype is not in the key
    if key not in _memo:
        _memo[key] = torch.pow(math.e, self)
    return _memo[key].clone()


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("exp", _exp, "CPU")
'''


def exp_memoised_by_shape():
    """exp through pow (another kernel), memoised on the input's shape and values: the dtype left out of the key."""
    memo = {}

    def _exp(self):
        key = (tuple(self.shape), tuple(self.detach().double().reshape(-1).tolist()))
        if key not in memo:
            memo[key] = torch.pow(math.e, self)
        return memo[key].clone()

    return _exp


@pytest.mark.slow
def test_a_cache_ignoring_the_dtype_hands_b_a_result_of_the_wrong_dtype(plant, tmp_path):
    plant("exp", exp_memoised_by_shape())
    found = [f for o in deep_outcomes("exp", "float32", variants=("functional",), samples=2)
             if o.case.oracle == "repeat:dtype=float64" for f in o.findings]
    assert found, "the dtype case found nothing"
    f = found[0]
    assert f.kind == "stale_result" and f.op == "aten.exp.default" and f.mismatch.attribute == "dtype"
    assert f.mismatch.expected == "torch.float64" and f.mismatch.actual == "torch.float32"
    assert "returns a float32 out for float64 inputs after a call in float32" in f.summary, f.summary
    assert decode_detail(Detail, f) == Detail(check=DTYPES, b_dtype="float64")
    # its repro script (what `torchsleuth repro` prints): A, B in float64, A again, B's dtypes against the meta device
    text = repro.script(f)
    assert "No repro could be generated" not in text and "OTHER_DTYPE = 'float64'" in text
    runs = run_with_and_without(text, EXP_PLANT, tmp_path)
    assert runs["planted.py"].returncode == 1, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert "out: torch.float32, the meta device says torch.float64" in runs["planted.py"].stdout
    assert "BUG PRESENT" in runs["planted.py"].stdout
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr
    assert "out: torch.float64, the meta device says torch.float64" in runs["clean.py"].stdout


def test_a_change_that_makes_the_call_raise_is_skipped_with_the_reason():
    case = Case(op="nn.functional.hardtanh", variant="functional", dtype="float32", device="cpu", sample=1, oracle="repeat:min_val=0.5")
    outcome = run_case(case)
    assert outcome.status == "skip" and "the call with min_val=0.5 raises" in outcome.reason


def test_a_sample_without_the_number_is_skipped():
    outcome = run_case(Case(op="add", variant="functional", dtype="float32", device="cpu", sample=0, oracle="repeat:alpha=1"))
    assert outcome.status == "skip" and "no number argument alpha" in outcome.reason


# --- planted --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, way", [("float32", "nudged float64"), ("float64", "nudged float64"), ("bfloat16", "nudged float64")])
def test_a_cache_ignoring_a_number_serves_a_stale_result(plant, dtype, way):
    plant("hardtanh", memoising_hardtanh())
    outcomes = deep_outcomes("nn.functional.hardtanh", dtype, variants=("functional",), samples=2)
    found = [f for o in outcomes for f in o.findings]
    assert {f.case_id.rsplit("@", 1)[1] for f in found} == {"repeat:min_val=-0.25", "repeat:max_val=0.25"}, [(o.case.id, o.status, o.reason) for o in outcomes]
    for f in found:
        assert (f.kind, f.reference, f.op, f.variant, f.dtype) == ("stale_result", "repeat", "aten.hardtanh.default", "functional", dtype)
        number = "min_val" if "min_val" in f.case_id else "max_val"
        assert f.summary.startswith(f"hardtanh [{dtype}] returns the result of {number}=") and f"when called again with {number}=" in f.summary
        assert f"its {way} reference" in f.summary, f.summary
        assert f.mismatch is not None and f.call is not None
        detail = decode_detail(Detail, f)
        assert (detail.check, detail.argument, detail.b_reference) == (STALE, number, way)
        assert detail.reference_dtype == "float64" and detail.a_number and detail.b_number and not detail.b_dtype


def test_a_cache_handing_out_the_previous_result_makes_a_again_differ(plant):
    plant("hardtanh", lagging_hardtanh())
    outcomes = deep_outcomes("nn.functional.hardtanh", "float32", variants=("functional",), samples=2)
    found = [f for o in outcomes for f in o.findings]
    assert found, [(o.case.id, o.status, o.reason) for o in outcomes]
    for f in found:
        assert f.kind == "stale_result" and "gives other bits for" in f.summary and "after a call with" in f.summary, f.summary
        assert "A again differs from A" in f.detail and decode_detail(Detail, f).check == AGAIN


def test_a_planted_stale_result_shrinks_and_replays_without_turning_flaky(plant, run_sweep):
    plant("hardtanh", memoising_hardtanh())
    result = run_sweep(sweep_config("nn.functional.hardtanh", samples=2))
    found = stale(result)
    assert found and not [f for f in result.flaky if f.kind == "stale_result"]
    for f in found:
        shrunk = result.shrunk[f.id]
        assert shrunk.status == "shrunk", shrunk
        assert Case.parse(shrunk.case_id).oracle == Case.parse(f.case_id).oracle
        assert result.reported(f).kind == "stale_result"


@pytest.mark.slow
def test_the_planted_findings_repro_exits_1_with_the_plant_and_0_without(plant, tmp_path):
    plant("hardtanh", memoising_hardtanh())
    finding = next(f for o in deep_outcomes("nn.functional.hardtanh", "float32", variants=("functional",), samples=1) for f in o.findings)
    runs = run_with_and_without(repro.script(finding), MEMO_PLANT, tmp_path)
    assert runs["planted.py"].returncode == 1, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert "BUG PRESENT" in runs["planted.py"].stdout and "hold A's result" in runs["planted.py"].stdout
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr


def test_a_script_run_in_this_process_fails_with_the_plant_and_passes_without(capsys):
    """The memoising hardtanh's script (its helpers, repeat.helpers) run here, where the tests around it run it in
    fresh interpreters."""
    def planted():
        library = torch.library.Library("aten", "IMPL")
        override(library, "hardtanh", memoising_hardtanh())  # a cache of its own: empty
        return library

    library = planted()
    try:
        finding = next(f for o in deep_outcomes("nn.functional.hardtanh", "float32", variants=("functional",), samples=1)
                       for f in o.findings)
    finally:
        library._destroy()
    main = script_main(repro.script(finding))
    assert main() == 0, capsys.readouterr().out
    library = planted()
    try:
        assert main() == 1
    finally:
        library._destroy()
    out = capsys.readouterr().out
    assert "BUG PRESENT" in out and "hold A's result" in out, out


@pytest.mark.slow
@pytest.mark.parametrize("form", ["number", "dtype"])
def test_a_findings_script_reads_its_detail_record_not_its_prose(plant, tmp_path, form):
    op, dtype_case = ("nn.functional.hardtanh", False) if form == "number" else ("exp", True)
    plant(*(("hardtanh", memoising_hardtanh()) if form == "number" else ("exp", exp_memoised_by_shape())))
    finding = next(f for o in deep_outcomes(op, "float32", variants=("functional",), samples=2) for f in o.findings
                   if f.case_id.endswith("@repeat:dtype=float64") == dtype_case)
    blank = dataclasses.replace(finding, detail="")
    text = repro.script(blank)
    assert text == repro.script(finding)  # the sentence is for a reader: nothing in the script comes from it
    runs = run_with_and_without(text, MEMO_PLANT if form == "number" else EXP_PLANT, tmp_path)
    assert runs["planted.py"].returncode == 1, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr
    # a finding without its record (stored before findings carried one) gets a script that says why it cannot check
    assert "No repro could be generated" in repro.script(dataclasses.replace(finding, data=""))


# --- clean ------------------------------------------------------------------------------------------

CLEAN = ("add", "sub", "nn.functional.hardtanh", "nn.functional.threshold", "lerp", "addcmul", "sum", "cumsum", "clamp",
         "nn.functional.leaky_relu", "nn.functional.softplus")


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int64", "bool"])
def test_real_kernels_are_clean(dtype):
    outcomes = [o for op in CLEAN for o in deep_outcomes(op, dtype)]
    assert not [f.summary for o in outcomes for f in o.findings]
    assert not [o.reason for o in outcomes if o.status == "error"]
    assert sum(o.status == "pass" for o in outcomes) >= 5, [(o.case.id, o.status, o.reason) for o in outcomes]


def test_a_crash_in_a_repeat_case_gets_a_script_that_makes_bs_call_in_a_child():
    # the sweep sees a crash from outside the worker; the call it describes is A's
    from torchsleuth.run.records import CallSpec, TensorSpec

    spec = CallSpec(function="torch.native_batch_norm", args_src="T['input'], None, None, None, None, True, 0.5, 1e-05", kwargs_src="",
                    tensors=(TensorSpec(path="input", shape=(1, 2), stride=(2, 1), storage_offset=0, storage_numel=6, dtype="float32",
                                        device="cpu", layout="contiguous"),), variant="functional")
    case_id = "native_batch_norm|functional|float32|cpu|s9|contiguous|@repeat:args[4]=False"
    finding = calls.finding(Case.parse(case_id), kind="crash", reference="isolation", op="native_batch_norm",
                            summary="native_batch_norm crashes", mismatch=None, call_spec=spec)
    text = repro.script(finding)
    assert "torch.native_batch_norm(T['input'], None, None, None, None, False, 0.5, 1e-05)" in text
    assert "TORCHSLEUTH_REPRO_CHILD" in text


def test_a_crash_in_a_dtype_case_gets_a_script_that_makes_bs_call_in_the_other_dtype_in_a_child():
    import zlib

    from torchsleuth.run.records import CallSpec, TensorSpec

    x = torch.tensor([[1.5, -2.25], [0.1, 3.0]])
    spec = CallSpec(function="torch.sum", args_src="T['input']", kwargs_src="dtype=torch.float32",
                    tensors=(TensorSpec(path="input", shape=(2, 2), stride=(2, 1), storage_offset=0, storage_numel=4, dtype="float32",
                                        device="cpu", layout="contiguous", data=zlib.compress(x.view(torch.uint8).numpy().tobytes())),),
                    variant="functional")
    case_id = "sum|functional|float32|cpu|s1|contiguous|@repeat:dtype=float64"
    finding = calls.finding(Case.parse(case_id), kind="crash", reference="isolation", op="sum", summary="sum crashes", mismatch=None, call_spec=spec)
    text = repro.script(finding)
    assert "torch.sum(T['input'], dtype=torch.float64)" in text and "TORCHSLEUTH_REPRO_CHILD" in text
    namespace = {"__name__": "repro"}
    exec(compile(text, "repro.py", "exec"), namespace)
    rebuilt = namespace["tensors"]()["input"]
    assert rebuilt.dtype == torch.float64 and torch.equal(rebuilt, x.double())  # B's tensors: A's float32 values in float64
