"""Values the CPU refuses are not sent to a device where an index out of range asserts (run.references: ``Refused``).

On a CUDA device an out-of-range index stops the kernel at a device-side assert that ends the worker's context, and
now and then holds every process on the GPU for the driver's 5-second context-switch timeout (bench/cuda-sweep.md,
run Z). The rule needs only the CPU to decide: here it is turned on for the CPU itself (``ASSERTING``), and each case's
calls on the device under test are counted (``References._run`` without a ``device``: the contiguous reference; the
CPU twin and the float64 runs pass one).
"""

from __future__ import annotations

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case
from torchsleuth.run import references

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# cases whose values torchsleuth changed and the CPU refuses: an emptied weight under embedding's indices, a target past
# nll_loss's emptied classes (and its gradient), an index past scatter_add's dim set by the search, repeats expanded
# past repeat_interleave's output_size
REFUSED = ("nn.functional.embedding|functional|float32|cpu|s0|input=empty",
           "nn.functional.nll_loss|functional|float32|cpu|s30|input=empty,weight=empty",
           "nn.functional.nll_loss|backward|float32|cpu|s30|input=empty,weight=empty",
           "scatter_add|functional|int64|cpu|s3|contiguous|arg:args[0]=-1",
           "repeat_interleave|functional|float32|cpu|s4|repeats=expanded")


@pytest.fixture
def device_calls(monkeypatch):
    """The base cases whose contiguous reference ran on the device under test, in order."""
    seen = []
    run = references.References._run

    def counted(self, tensors, *, device=None, wide=False, mode=None):
        if device is None:
            seen.append(self.base.case.id)
        return run(self, tensors, device=device, wide=wide, mode=mode)

    monkeypatch.setattr(references.References, "_run", counted)
    return seen


@pytest.fixture
def asserting_cpu(monkeypatch):
    monkeypatch.setattr(references, "ASSERTING", references.ASSERTING | {"cpu"})


@pytest.mark.parametrize("case_id", REFUSED)
def test_values_the_cpu_refuses_are_not_sent_to_an_asserting_device(asserting_cpu, device_calls, case_id):
    outcome = run_case(Case.parse(case_id))
    assert outcome.status == "raised"
    assert "Refused: the CPU refuses these values" in outcome.reason and "takes the sample's own" in outcome.reason
    assert device_calls == []


def test_values_the_cpu_takes_are_sent_as_before(asserting_cpu, device_calls):
    # the same sample laid out contiguously, and expanded (values changed, which the CPU takes)
    for case_id in ("nn.functional.embedding|functional|float32|cpu|s0|contiguous",
                    "nn.functional.embedding|functional|float32|cpu|s1|input=expanded"):
        device_calls.clear()
        outcome = run_case(Case.parse(case_id))
        assert outcome.status == "pass", (case_id, outcome.reason)
        assert device_calls, case_id


def test_where_the_cpu_refuses_the_samples_own_values_too_they_are_sent(asserting_cpu, device_calls, plant):
    # the CPU's kernel refuses every call (as where the CPU lacks the op or the dtype): the device is asked all the same
    def refusing(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
        raise NotImplementedError("no embedding here")

    plant("embedding", refusing)
    outcome = run_case(Case.parse(REFUSED[0]))
    assert outcome.status == "raised" and "no embedding here" in outcome.reason and "Refused" not in outcome.reason
    assert device_calls == [REFUSED[0]]


def test_a_cpu_without_the_kernel_for_the_changed_call_refuses_no_values_and_the_call_is_sent(asserting_cpu, device_calls, plant):
    # the CPU lacks a kernel only for what the changed values reach (bicubic's antialias in half precision has none on
    # the CPU, and CUDA's is right): no value was refused, so the device is asked; its own error is the case's outcome
    def lacking(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
        if weight.numel() == 0:
            raise NotImplementedError("\"embedding_empty\" not implemented for 'Float'")
        return weight.index_select(0, indices.reshape(-1)).reshape(*indices.shape, weight.shape[-1])

    plant("embedding", lacking)
    outcome = run_case(Case.parse(REFUSED[0]))
    assert "Refused" not in outcome.reason and "not implemented for 'Float'" in outcome.reason, outcome.reason
    assert device_calls == [REFUSED[0]]
    assert references.unimplemented(RuntimeError("\"upsample_bicubic2d\" not implemented for 'Half'"))  # older releases
    assert not references.unimplemented(IndexError("index out of range in self"))


def test_off_an_asserting_device_the_call_is_made_and_raises_there(device_calls):
    outcome = run_case(Case.parse(REFUSED[0]))
    assert outcome.status == "raised" and "Refused" not in outcome.reason and "index_select" in outcome.reason
    assert device_calls


CPU_TWIN_CRASHING = """
import functools, os, signal
from torchsleuth.run import references

references.ASSERTING = references.ASSERTING | {"cpu"}
computed = references.References.cpu.func


def crashing(self):  # the CPU's kernel dies on emptied values, as lu_unpack's and pdist's gradients do
    if any(layout == "empty" for _, layout in self.base.case.layouts):
        os.kill(os.getpid(), signal.SIGSEGV)
    return computed(self)


references.References.cpu = functools.cached_property(crashing)
references.References.cpu.__set_name__(references.References, "cpu")
"""


def test_a_case_whose_cpu_twin_kills_the_worker_is_replayed_alone_on_the_device_and_is_no_crash(run_sweep, tmp_path):
    plant = tmp_path / "cpu_twin_crashing.py"
    plant.write_text(CPU_TWIN_CRASHING)
    config = SweepConfig(ops=resolve_ops("nn.functional.embedding"), dtypes=("float32",), variants=("functional",),
                         layouts=("contiguous", "empty"), samples=1, workers=1, shrink=False, imports=(str(plant),))
    result = run_sweep(config)
    assert not result.findings
    collateral = [detail for kind, detail in result.notes if kind == "collateral"]
    assert len(collateral) == 1 and "|input=empty:" in collateral[0], result.notes
    # replayed alone, the case made its call on the device, where (this being the CPU) it raised on its own
    assert any(reason.startswith("the contiguous reference raised: RuntimeError") for reason in result.reasons.get("raised", {}))
    assert not any("Refused" in reason for reason in result.reasons.get("raised", {}))


@cuda
def test_a_cuda_sweep_sends_no_refused_values_and_loses_no_worker(run_sweep):
    ops = resolve_ops("nn.functional.embedding,nn.functional.nll_loss,scatter_add")
    result = run_sweep(SweepConfig(ops=ops, dtypes=("float32",), device="cuda", workers=2, shrink=False))
    raised = result.reasons.get("raised", {})
    assert any("the CPU refuses these values" in reason for reason in raised)
    assert not any("device-side assert" in reason for reason in raised)
    assert not [f for f in result.findings if f.kind == "crash"]
    assert [kind for kind, _ in result.notes] == ["executor"]  # no worker died outside a case
