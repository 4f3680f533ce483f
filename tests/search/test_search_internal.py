"""The internal search (search.internal): the aten kernels a public op dispatches to, called directly under
every layout.

The plant: on torch 2.13's CPU, ``F.group_norm`` hands ``aten::native_group_norm``
its input contiguous (or channels_last, its suggested memory format) and its
weight and bias contiguous, whatever layout the caller gave. (``F.softmax``
does not: it hands ``aten::_softmax`` a transposed input as it is, so a bug
there is the plain sweep's to find.) A ``native_group_norm`` that reads any
other input as if it were contiguous is wrong only for a direct call: the
sweep never reaches it, the search does and names the kernel, the edit and
the layout.
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases import opinfo, reach
from torchsleuth.cases.records import LAYOUTS, Case
from torchsleuth.engine import run_case
from torchsleuth.errors import UsageError
from torchsleuth.report import repro
from torchsleuth.search import edits
from torchsleuth.run.samples import samples_of
from torchsleuth.search import composed, internal, plan

GROUP_NORM = "nn.functional.group_norm"
DIRECT = "internal:aten.native_group_norm.default#0>0"  # judged on the output F.group_norm uses (not mean, rstd)


def group_norm_reading_its_input_as_contiguous(X, gamma, beta, N, C, HxW, group, eps):
    """``native_group_norm`` that reads an input laid out in neither of the formats ``F.group_norm`` passes as if it
    were contiguous (its storage from the offset on, row-major)."""
    if not any(X.is_contiguous(memory_format=f) for f in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d)):
        strides, step = [], 1
        for size in reversed(X.shape):
            strides.insert(0, step)
            step *= size
        X = X.as_strided(X.shape, strides, X.storage_offset())
    x = X.double().reshape(N, group, -1)
    mean, var = x.mean(-1), x.var(-1, unbiased=False)
    rstd = (var + eps).rsqrt()
    out = ((x - mean[..., None]) * rstd[..., None]).reshape(N, C, -1)
    if gamma is not None:
        out = out * gamma.double().reshape(1, C, 1)
    if beta is not None:
        out = out + beta.double().reshape(1, C, 1)
    return out.reshape(X.shape).to(X.dtype), mean.to(X.dtype), rstd.to(X.dtype)


def config(**extra) -> SweepConfig:
    spec = dict(ops=resolve_ops(GROUP_NORM), dtypes=("float32",), variants=("functional",),
                layouts=("contiguous", "transposed", "strided", "channels_last"), samples=2, workers=0, search=("internal",)) | extra
    return SweepConfig(**spec)


def listing(result) -> str:
    return "\n".join([f"statuses {result.statuses}; reasons {result.reasons}"]
                     + [f"  {f.kind} {f.op} {f.variant} {f.case_id}: {f.summary}" for f in result.findings])


def group_norm_sample():
    return next(s for s in samples_of(GROUP_NORM, "float32") if s.input.dim() == 3)


# --- which kernels, and the edit ---------------------------------------------------------------------


@pytest.mark.parametrize("name, expected", [
    ("aten._softmax.default", True), ("aten.native_layer_norm.default", True), ("aten.mm.default", True),
    ("aten._embedding_bag_forward_only.default", True), ("aten.native_group_norm.default", True),
    ("aten.transpose.int", False), ("aten.t.default", False), ("aten.lift_fresh.default", False),  # views
    ("aten.view_copy.default", False), ("aten._unsafe_view.default", False), ("aten.clone.default", False),  # copies
    ("aten.copy_.default", False), ("aten.fill_.Scalar", False), ("aten.resize_.default", False),  # writes
    ("aten.empty.memory_format", False), ("aten.empty_like.default", False), ("aten._to_copy.default", False),  # factories
    ("aten.add.Tensor", False), ("aten.bernoulli.default", False), ("aten._local_scalar_dense.default", False),
    ("aten.softmax.int", False),  # CompositeImplicitAutograd: it decomposes, no kernel of its own
])
def test_eligible_overloads_are_decided_from_facts(name, expected):
    assert internal.eligible(name) is expected


def test_only_the_outputs_the_op_uses_are_judged():
    # F.ctc_loss keeps _ctc_loss's loss and drops log_alpha (partly uninitialized); F.max_pool2d keeps the indices
    # only when asked for them
    ctc = {e for s in samples_of("nn.functional.ctc_loss", "float32") for e in plan(("internal",), "nn.functional.ctc_loss", "functional", "float32", s)}
    assert ("internal:aten._ctc_loss.Tensor#0>0",) in ctc and not any(e[0].startswith("internal:aten._ctc_loss") and ">" not in e[0] for e in ctc)
    pools = {e for s in samples_of("nn.functional.max_pool2d", "float32") for e in internal.plan("nn.functional.max_pool2d", "functional", "float32", s)}
    assert pools == {("internal:aten.max_pool2d_with_indices.default#0",), ("internal:aten.max_pool2d_with_indices.default#0>0",)}


def test_the_plan_names_the_kernels_the_op_dispatches_to_outside_its_own_packets():
    softmax = next(s for s in samples_of("softmax", "float32") if s.input.dim() == 2)
    assert internal.plan("softmax", "functional", "float32", softmax) == [("internal:aten._softmax.default#0",)]
    assert internal.plan("softmax", "backward", "float32", softmax) == []  # a direct call is a functional one
    assert internal.plan(GROUP_NORM, "functional", "float32", group_norm_sample()) == [(DIRECT,)]
    linear = {e for s in samples_of("nn.functional.linear", "float32") for e in plan(("internal",), "nn.functional.linear", "functional", "float32", s)}
    assert {e[0].rpartition("#")[0] for e in linear} == {"internal:aten.mm.default", "internal:aten.addmm.default"}
    add = samples_of("add", "float32")[0]
    assert internal.plan("add", "functional", "float32", add) == []  # add.Tensor is its own packet's: the sweep calls it


def fresh_samples(op: str, dtype: str) -> list:
    return opinfo.samples(opinfo.get(op), getattr(torch, dtype))


@pytest.mark.parametrize("op", ["softmax", "nn.functional.cross_entropy", "nn.functional.linear"])
def test_the_plan_is_deterministic(op):
    first = [internal.plan(op, "functional", "float32", s) for s in fresh_samples(op, "float32")]
    again = [internal.plan(op, "functional", "float32", s) for s in fresh_samples(op, "float32")]
    assert first == again and any(first)


def test_the_plan_is_bounded_over_many_samples():
    samples = samples_of("nn.functional.max_pool2d", "float32")
    planned = [e for s in samples for e in internal.plan("nn.functional.max_pool2d", "functional", "float32", s)]
    assert len(samples) > 1000 and 0 < len(planned) <= 2 * internal.MAX_SAMPLES, len(planned)  # identical samples plan alike


def test_the_edit_makes_the_traced_call_the_sample_and_the_overload_the_function():
    sample = group_norm_sample()
    edited = edits.apply(sample, (DIRECT,), op=GROUP_NORM)
    n, c = sample.input.shape[:2]
    assert torch.equal(edited.input, sample.input) and edited.input.is_contiguous()
    assert edited.input is not sample.input  # a clone: the sample is not changed
    assert edited.args[2:6] == (n, c, sample.input[0, 0].numel(), sample.args[0])  # N, C, HxW, group as the op passed them
    assert edited.output_process_fn_grad(edited) is edited
    entry = opinfo.get(GROUP_NORM)
    functions = reach.calls(entry, opinfo.functions(entry), (DIRECT,))
    assert functions["functional"] == reach.Outputs(overload=torch.ops.aten.native_group_norm.default, kept=(0,))
    assert reach.name_of(functions["functional"]) == "(lambda *args, **kwargs: torch.ops.aten.native_group_norm.default(*args, **kwargs)[0])"
    assert str(functions["functional"]) == "aten.native_group_norm.default"  # what coverage counts as reached
    whole = reach.calls(entry, opinfo.functions(entry), ("internal:aten.native_group_norm.default#0",))["functional"]
    assert whole is torch.ops.aten.native_group_norm.default and reach.name_of(whole) == "torch.ops.aten.native_group_norm.default"
    assert len(whole(edited.input, *edited.args)) == 3 and functions["functional"](edited.input, *edited.args).shape == sample.input.shape
    two = reach.Outputs(overload=torch.ops.aten.native_group_norm.default, kept=(0, 2))
    assert len(eval(reach.name_of(two), {"torch": torch})(edited.input, *edited.args)) == 2  # the script's spelling runs
    # every layout the edited call's tensors take, each on all of them at once, and the contiguous call
    assigned = [laid for variant, laid in composed(GROUP_NORM, (DIRECT,), ["functional"], sample, LAYOUTS)]
    assert assigned[0] == () and len(assigned) == len({a[0][1] for a in assigned[1:]}) + 1
    assert (("args[0]", "strided"), ("args[1]", "strided"), ("input", "strided")) in assigned
    assert ("input", "expanded") in {pair for laid in assigned for pair in laid}  # the search's own: every layout, value-changing too


@pytest.mark.parametrize("edit, words", [
    ("internal:aten.no_such_kernel.default#0", "names no call of an aten overload"),
    ("internal:aten.native_group_norm.default", "names no call"),
    ("internal:aten.native_group_norm.default#x", "names no call"),
    ("internal:aten.native_group_norm.default#1", "makes 1 call"),
    ("internal:aten.native_group_norm.default#0>3", "keeps outputs"),
    ("internal:aten.native_group_norm.default#0>x", "keeps outputs"),
    ("internal:aten._softmax.default#0", "makes 0 call"),
])
def test_a_bad_internal_edit_is_one_usage_error_line(edit, words):
    with pytest.raises(UsageError, match=words) as raised:
        edits.apply(group_norm_sample(), (edit,), op=GROUP_NORM)
    assert "\n" not in str(raised.value)
    with pytest.raises(UsageError, match="needs the op"):
        edits.apply(group_norm_sample(), (DIRECT,))


# --- finding what only a direct call reaches ----------------------------------------------------------


@pytest.mark.slow
def test_a_bug_only_a_direct_call_reaches_is_found_and_named_with_the_kernel_the_edit_and_the_layout(plant, run_sweep, tmp_path):
    plant("native_group_norm", group_norm_reading_its_input_as_contiguous)
    assert not run_sweep(config(search=())).findings  # F.group_norm never passes such an input
    result = run_sweep(config())
    assert result.findings, listing(result)
    for f in result.findings:
        case = Case.parse(f.case_id)
        assert (f.op, f.opinfo, f.kind) == ("aten.native_group_norm.default", GROUP_NORM, "mismatch"), listing(result)
        assert case.edits[0] == DIRECT and "torch.ops.aten.native_group_norm.default(" in f.call.function, listing(result)
        assert dict(case.layouts).get("input") in ("transposed", "strided"), listing(result)
    # the repro script calls the kernel by name: exit 1 with the plant; without it the real kernel refuses such an
    # input (loud), and the script says it cannot check (exit 2)
    finding = result.findings[0]
    text = repro.script(finding)
    assert "torch.ops.aten.native_group_norm.default(" in text
    plant_source = "\n".join(["import torch", inspect.getsource(group_norm_reading_its_input_as_contiguous),
                              '_lib = torch.library.Library("aten", "IMPL")',
                              "_lib.impl('native_group_norm', group_norm_reading_its_input_as_contiguous, 'CPU')", "", ""])
    (tmp_path / "clean.py").write_text(text)
    (tmp_path / "planted.py").write_text(plant_source + text)
    runs = {name: subprocess.run([sys.executable, str(tmp_path / name)], capture_output=True, text=True, timeout=120)
            for name in ("clean.py", "planted.py")}
    assert runs["planted.py"].returncode == 1, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert runs["clean.py"].returncode == 2 and "the call raised" in runs["clean.py"].stdout, runs["clean.py"].stdout + runs["clean.py"].stderr


def test_the_search_is_clean_on_the_real_kernels_and_a_case_replays_from_its_id(run_sweep):
    result = run_sweep(config(ops=resolve_ops(f"{GROUP_NORM},softmax,nn.functional.layer_norm")))
    assert not result.findings, listing(result)
    assert not result.statuses.get("error"), listing(result)
    # the real native_group_norm refuses an input it does not take: loud, never a finding
    transposed = Case(op=GROUP_NORM, variant="functional", dtype="float32", device="cpu", sample=0, edits=(DIRECT,),
                      layouts=(("input", "transposed"),))
    assert Case.parse(transposed.id) == transposed
    assert run_case(transposed).status == "raised"
    direct = dataclasses.replace(transposed, layouts=())
    outcome = run_case(direct)
    assert outcome.status == "pass" and "aten.native_group_norm.default" in outcome.reached, outcome

