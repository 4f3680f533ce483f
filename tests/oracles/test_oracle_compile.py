"""The ``compile`` oracle: torch.compile against eager, and eager before against eager after.

Plants, each in this process (``workers=0``) and removed when its test ends:

* an eager kernel that is wrong (``neg`` off by one in float32, through
  ``torch.library``): inductor generates its own code for neg, so the
  compiled call and eager disagree;
* a decomposition that turns on flush-denormal mode while inductor compiles
  neg: global state changed by compiling, which no OpInfo sample shows in its
  values, so the fingerprint must;
* a decomposition that changes what eager neg computes each time neg is
  compiled (a cache that a compile fills): eager after differs from eager
  before.

Clean ops stay clean, and a compile that raises is a ``raised`` outcome.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.judge.plugin import decode_detail
from torchsleuth.oracles.compile import oracle as compiled
from torchsleuth.oracles.compile.detail import AFTER, COMPILED, STATE, Detail
from torchsleuth.report import repro

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # inductor warns about its own internals


def config(ops: str, **extra) -> SweepConfig:
    spec = dict(dtypes=("float32",), variants=("functional",), layouts=("contiguous",), samples=1, workers=0,
                oracles=("compile",)) | extra
    return SweepConfig(ops=resolve_ops(ops), **spec)


def listing(result) -> str:
    lines = [f"statuses {result.statuses}; reasons {result.reasons}; flaky {[f.summary for f in result.flaky]}"]
    lines += [f"  {f.kind} {f.op} {f.reference} {f.case_id}: {f.summary} / {f.mismatch.describe() if f.mismatch else ''}" for f in result.findings]
    return "\n".join(lines)


def of_compile(result) -> list:
    return [f for f in result.findings if f.reference == "compile"]


def aspect(finding) -> str:
    """Which of the oracle's three checks a finding failed, from its Detail record."""
    return decode_detail(Detail, finding).aspect


# neg off by one in float32 only: what the eager plant does, here and in the repro test.
def neg_off_by_one(x):
    result = torch.ops.aten.mul.Tensor(x, -1)
    return result + 1 if x.dtype == torch.float32 else result


PLANT_SOURCE = '''
import warnings
import torch
_lib = torch.library.Library("aten", "IMPL")
def _neg(x):
    result = torch.ops.aten.mul.Tensor(x, -1)
    return result + 1 if x.dtype == torch.float32 else result
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("neg", _neg, "CPU")
'''


@pytest.fixture
def decomposition():
    """``decomposition(fn)`` runs ``fn`` whenever inductor decomposes aten.neg, until the test ends."""
    from torch._inductor import decomposition as table

    target = torch.ops.aten.neg.default
    previous = table.decompositions.get(target)

    def install(fn):
        table.decompositions[target] = fn
        table.fast_random_decomps.cache_clear()

    try:
        yield install
    finally:
        if previous is None:
            table.decompositions.pop(target, None)
        else:
            table.decompositions[target] = previous
        table.fast_random_decomps.cache_clear()
        torch.set_flush_denormal(False)
        torch._dynamo.reset()


# --- compiled against eager ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def eager_plant_sweep(tmp_path_factory):
    """neg with a wrong eager kernel, and abs beside it, swept with the compile oracle (shrinking included)."""
    from torchsleuth import sweep
    from torchsleuth.drill.override import override

    library = torch.library.Library("aten", "IMPL")
    try:
        override(library, "neg", neg_off_by_one)
        folder = tmp_path_factory.mktemp("compile")
        result = sweep(config("neg,abs"), db=str(folder / "runs.db"))
    finally:
        library._destroy()
        torch._dynamo.reset()
    return result


@pytest.mark.slow
def test_a_wrong_eager_kernel_disagrees_with_its_compiled_call(eager_plant_sweep):
    result = eager_plant_sweep
    found = of_compile(result)
    assert found, listing(result)
    for f in found:
        expected = ("compile_mismatch", "aten.neg.default", "neg", "functional", "float32", ())
        assert (f.kind, f.op, f.opinfo, f.variant, f.dtype, f.layouts) == expected, listing(result)
        assert f.case_id.endswith("|@compile")
        assert f.mismatch.path == "compiled: out" and f.mismatch.attribute == "values", f.mismatch
        assert f.mismatch.max_abs_err == pytest.approx(1.0)
        assert "compiled by torch.compile (inductor) differs from eager" in f.summary
        assert decode_detail(Detail, f) == Detail(aspect=COMPILED, values_compared=True, imports=())
    assert not result.flaky, listing(result)
    assert all(result.shrunk[f.id].status == "shrunk" for f in found), result.shrunk


@pytest.mark.slow
def test_the_clean_op_beside_it_passes(eager_plant_sweep):
    result = eager_plant_sweep
    assert not [f for f in result.findings if f.opinfo == "abs"], listing(result)
    assert "error" not in result.statuses, listing(result)


@pytest.mark.slow
def test_the_script_reads_the_detail_record_never_the_prose(eager_plant_sweep):
    finding = eager_plant_sweep.reported(of_compile(eager_plant_sweep)[0])
    assert repro.script(dataclasses.replace(finding, detail="")) == repro.script(finding)
    stored_before_records = repro.script(dataclasses.replace(finding, data=""))
    assert "sys.exit(2)" in stored_before_records and "no record of the check it failed" in stored_before_records


@pytest.mark.slow
def test_repro_fails_with_the_plant_and_passes_without(eager_plant_sweep, tmp_path):
    """Written from the finding's Detail record alone: its prose blanked."""
    finding = eager_plant_sweep.reported(of_compile(eager_plant_sweep)[0])
    text = repro.script(dataclasses.replace(finding, detail=""))
    assert "ASPECT = 'compiled'" in text
    scripts = {"planted": PLANT_SOURCE + text, "clean": text}
    running = {}
    for name, source in scripts.items():
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        running[name] = subprocess.Popen([sys.executable, str(path)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = {name: (p.communicate(timeout=300), p.returncode) for name, p in running.items()}
    (out, err), code = done["planted"]
    assert code == 1, out + err
    assert "BUG PRESENT" in out
    (out, err), code = done["clean"]
    assert code == 0, out + err
    assert "OK: the compiled call agrees with eager" in out


# --- global state changed by compiling -------------------------------------------------------------------


def test_a_compile_that_turns_on_flush_denormal_is_caught_and_undone(decomposition, run_sweep):
    def neg(x):
        torch.set_flush_denormal(True)  # the bug
        return NotImplemented  # inductor then lowers neg as usual

    decomposition(neg)
    result = run_sweep(config("neg"))
    found = of_compile(result)
    assert len(found) == 1, listing(result)
    f = found[0]
    assert (f.mismatch.path, f.mismatch.attribute, f.mismatch.expected, f.mismatch.actual) == ("global state", "flush_denormal", "False", "True")
    assert "changed global state: flush_denormal False -> True" in f.summary
    assert not compiled._flush_denormal(), "the oracle sets a changed flag back"
    assert not result.flaky and result.shrunk[f.id].status == "shrunk", (listing(result), result.shrunk)
    assert aspect(f) == STATE and f.detail.startswith("global state; ")


def test_a_compile_that_changes_later_eager_results_is_caught(plant, decomposition, run_sweep):
    compiles = [0]

    def neg_kernel(x):  # right until neg has been compiled, then off by a little more each time
        return torch.ops.aten.mul.Tensor(x, -1) + compiles[0] * 0.25

    def neg_decomposition(x):
        compiles[0] += 1  # the bug: compiling fills a cache that eager neg reads
        return NotImplemented

    plant("neg", neg_kernel)
    decomposition(neg_decomposition)
    result = run_sweep(config("neg"))
    after = [f for f in of_compile(result) if aspect(f) == AFTER]
    assert after, listing(result)
    assert after[0].mismatch.path == "eager after compile: out"
    assert "gives other results in eager after torch.compile compiled it than before" in after[0].summary
    assert not result.flaky, listing(result)


@pytest.mark.parametrize("op, found", [("empty_like", False), ("zeros_like", True)])
def test_eager_after_is_judged_by_values_only_where_the_result_has_values(op, found, monkeypatch, run_sweep):
    """Each eager call of the case gets other "memory": garbage for empty_like, a bug for zeros_like."""
    calls = [0]
    eager = compiled._eager

    def other_memory_each_call(prepared, tensors):
        calls[0] += 1
        return eager(prepared, tensors).fill_(calls[0])

    monkeypatch.setattr(compiled, "_eager", other_memory_each_call)
    result = run_sweep(config(op, shrink=False))
    after = [f for f in of_compile(result) if aspect(f) == AFTER]
    assert bool(after) == found, listing(result)
    assert calls[0] >= 2, "eager ran before and after the compile"


SLOW_COMPILE = """
import time
import torch
from torch._inductor import decomposition as table

def _slow(x):
    time.sleep(12)  # inductor takes 12 s over neg; eager neg stays as fast as ever
    return NotImplemented

table.decompositions[torch.ops.aten.neg.default] = _slow
table.fast_random_decomps.cache_clear()
"""


@pytest.mark.slow
def test_a_compile_case_may_take_several_timeouts(tmp_path, run_sweep):
    """With --timeout 5 a compile that takes 12 s is no hang: a compile case gets SLOWER times 5 s."""
    from torchsleuth.judge.plugin import BUILTIN as deep

    assert deep.slower("neg|functional|float32|cpu|s0|contiguous|@compile") == compiled.SLOWER > 12 / 5
    assert deep.slower("neg|functional|float32|cpu|s0|contiguous") == deep.slower("neg|functional|float32|cpu|s0|contiguous|@repeat:alpha") == 1
    plant = tmp_path / "slow_compile.py"
    plant.write_text(SLOW_COMPILE)
    result = run_sweep(config("neg", workers=1, timeout=5.0, shrink=False, imports=(str(plant),)))
    assert result.findings == (), listing(result)
    assert result.statuses.get("pass", 0) == 2, listing(result)


def test_a_hang_in_a_deeper_oracles_case_says_so():
    from torchsleuth.cases.records import Case
    from torchsleuth.judge.isolation import isolation_outcome

    case = Case.parse("arange|functional|float32|cuda|s26|contiguous|@compile")
    finding = isolation_outcome(case, "hang", "no answer after 300 s").findings[0]
    assert finding.summary == "arange (functional) [float32] hangs on contiguous tensors in the compile oracle's case: no answer after 300 s"


# --- compiles that raise, and clean ops ---------------------------------------------------------------------


def test_a_compile_that_raises_is_raised_not_a_finding(run_sweep):
    result = run_sweep(config("allclose", shrink=False))  # data-dependent: no full graph
    assert of_compile(result) == [], listing(result)
    reasons = result.reasons.get("raised", {})
    assert any(reason.startswith("torch.compile raised:") for reason in reasons), listing(result)


@pytest.mark.slow
def test_clean_kernels_stay_clean(run_sweep):
    result = run_sweep(config("abs,add,sum,softmax", dtypes=("float32", "bfloat16"), shrink=False))
    assert of_compile(result) == [], listing(result)
    assert result.statuses.get("pass", 0) > 0 and "error" not in result.statuses, listing(result)
