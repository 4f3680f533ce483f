"""``torchsleuth watch``: the seed story as a command, planted faults localised, real models clean."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchsleuth import UsageError, watch
from torchsleuth.drill.override import planted
from torchsleuth.watch.shadow import signature

SCENARIOS = Path(__file__).parents[1] / "scenarios"
sys.path.insert(0, str(SCENARIOS))

import models  # noqa: E402
import sae  # noqa: E402


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchsleuth.cli.main", "watch", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


# --- the scenario: the seed story's sparse autoencoder, with and without the bug -------------


@pytest.mark.slow
def test_watch_names_the_frozen_encoder_weight_and_the_dropped_write(tmp_path):
    run = cli("--import", str(SCENARIOS / "sae_plant.py"), "--out", str(tmp_path / "out"), "--json", str(tmp_path / "f.json"),
              str(SCENARIOS / "sae.py"), "5", cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    text = " ".join(run.stdout.split())  # the terminal folds long lines
    assert "encoder.weight" in text and "did not change at Adam.step()" in text, run.stdout
    assert "non-contiguous" in text and "stride [1, 64]" in text
    assert "in-place addcmul_ on a transposed self" in text and "in-place addcdiv_ on a transposed self" in text
    assert "input is exp_avg_sq of encoder.weight" in text and "in Adam.step()" in text
    assert "final loss" in text  # the script ran to its end, as it would unwatched
    import json

    found = json.loads((tmp_path / "f.json").read_text())
    assert found["command"] == "watch"
    kinds = {(f["op"], f["kind"]) for f in found["findings"]}
    assert {("aten.addcmul_.default", "dropped_write"), ("aten.addcdiv_.default", "dropped_write")} <= kinds
    assert ("torch.optim.Adam.step", "invariant") in kinds


@pytest.mark.slow
def test_the_same_script_without_the_bug_is_clean(tmp_path):
    run = cli("--out", str(tmp_path / "out"), str(SCENARIOS / "sae.py"), "5", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no findings" in run.stdout and "calls judged" in run.stdout


@pytest.mark.slow
def test_invariants_only_still_names_the_frozen_weight(tmp_path):
    run = cli("--invariants-only", "--import", str(SCENARIOS / "sae_plant.py"), "--out", str(tmp_path / "out"),
              str(SCENARIOS / "sae.py"), "3", cwd=tmp_path)
    assert run.returncode == 1
    text = " ".join(run.stdout.split())
    assert "encoder.weight" in text and "did not change" in text
    assert "addcmul_" not in text  # no shadow replay


# --- faults elsewhere in the step, in this process ------------------------------------------


def addmm_wrong_on_a_transposed_weight(self, mat1, mat2, *, beta=1, alpha=1):
    out = beta * self + alpha * (mat1 @ mat2)
    return out * 1.5 if not mat2.is_contiguous() else out


def mm_wrong_on_a_transposed_self(self, mat2):
    out = (self.unsqueeze(-1) * mat2.unsqueeze(0)).sum(1)
    return out * 2 if not self.is_contiguous() else out


def test_a_forward_matmul_on_a_transposed_operand_is_localised():
    library = planted("addmm", addmm_wrong_on_a_transposed_weight)
    try:
        with watch() as w:
            models.train(models.mlp, steps=2)
    finally:
        library._destroy()
    ops = [f for f in w.findings if f.kind == "mismatch"]
    assert ops and {f.op for f in ops} == {"aten.addmm.default"}, [(f.op, f.summary) for f in w.findings]
    assert all(("args[1]", "transposed") in f.layouts for f in ops)
    assert "forward of 0" in ops[0].detail or "forward of 2" in ops[0].detail, ops[0].detail  # the Sequential's Linear


def test_a_backward_kernel_on_a_noncontiguous_grad_output_is_localised():
    library = planted("mm", mm_wrong_on_a_transposed_self)
    try:
        with watch() as w:
            models.train(models.mlp, steps=2)
    finally:
        library._destroy()
    ops = [f for f in w.findings if f.reference != "contract" or f.kind != "invariant"]
    mm = [f for f in ops if f.op == "aten.mm.default"]
    assert mm, [(f.op, f.summary) for f in w.findings]
    assert all(("input", "transposed") in f.layouts for f in mm)
    assert "backward (AddmmBackward0)" in mm[0].detail, mm[0].detail


@pytest.mark.parametrize("build", [models.mlp, models.cnn, models.transformer], ids=["mlp", "cnn-channels-last", "transformer"])
def test_real_small_models_are_clean(build):
    with watch(repeats=True) as w:  # every call judged: every value a false alarm could need
        models.train(build)
    assert w.shadow.judged > 100 and not w.shadow.errors
    assert not w.findings, [(f.op, f.summary, f.detail) for f in w.findings]


def test_watch_leaves_the_program_s_numbers_alone():
    # judging draws random numbers and runs ops; the program must not see any of it
    plain = models.train(models.transformer, steps=2)
    with watch():
        watched = models.train(models.transformer, steps=2)
    assert plain == watched


@pytest.mark.slow
def test_a_missing_script_is_a_usage_error(tmp_path):
    run = cli(str(tmp_path / "nope.py"), cwd=tmp_path)
    assert run.returncode == 2 and "no script" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    run = cli("--sample", "2", str(SCENARIOS / "sae.py"), cwd=tmp_path)
    assert run.returncode == 2 and "fraction" in run.stderr


def test_every_and_sample_cut_the_ops_judged():
    with watch(repeats=True) as full:
        sae.train(4)
    with watch(repeats=True, every=2, sample=0.5) as cheap:
        sae.train(4)
    assert 0 < cheap.shadow.judged < full.shadow.judged / 2.5
    assert torch.are_deterministic_algorithms_enabled() is False


def test_each_distinct_call_is_judged_once_by_default():
    # a loop makes the same calls every step: after the first steps nothing new is judged
    with watch() as short:
        sae.train(4)
    with watch() as long:
        sae.train(12)
    with watch(repeats=True) as every:
        sae.train(4)
    assert 0 < short.shadow.judged == long.shadow.judged < every.shadow.judged / 2
    # what sets a call apart: its layouts and dtypes, not its values
    first = (torch.ops.aten.add.Tensor, (torch.ones(2, 3),), {"alpha": 0.5})
    assert signature(*first) == signature(torch.ops.aten.add.Tensor, (torch.zeros(2, 3),), {"alpha": 0.25})
    assert signature(*first) != signature(torch.ops.aten.add.Tensor, (torch.ones(3, 2).t(),), {"alpha": 0.5})
    assert signature(*first) != signature(torch.ops.aten.add.Tensor, (torch.ones(2, 3),), {"alpha": 1.0})


def test_nan_and_missing_gradients_are_invariant_findings(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    unused = torch.nn.Linear(4, 4)  # in the optimizer, never in the forward: no gradient reaches it
    optimizer = torch.optim.SGD([*model.parameters(), *unused.parameters()], lr=0.1)
    with watch(invariants_only=True, db=str(tmp_path / "runs.db"), json=tmp_path / "findings.json", junit=tmp_path / "junit.xml") as w:
        for step in range(2):
            optimizer.zero_grad()
            x = torch.randn(3, 4)
            if step == 1:
                x[0, 0] = float("nan")
            model(x).sum().backward()
            optimizer.step()
    said = " | ".join(f.summary for f in w.findings)
    assert "no gradient reached a parameter of shape [4, 4] in no module" in said or "no gradient reached" in said, said
    assert "holds NaN or inf" in said, said
    assert all(f.kind == "invariant" for f in w.findings)
    # stored as a run like any other, through the run frame every command shares: read back, its outputs written
    assert w.result.run.command == "watch" and {f.id for f in w.result.findings} == {f.id for f in w.findings}
    assert w.result.run.finished is not None and w.result.seconds > 0
    document = json.loads((tmp_path / "findings.json").read_text())
    assert document["command"] == "watch" and {f["id"] for f in document["findings"]} == {f.id for f in w.findings}
    assert set(w.result.written) == {"findings file", "junit", "database"} and (tmp_path / "junit.xml").is_file()


def test_whole_tensor_checks_find_a_lone_infinity_and_pass_large_finite_values():
    # every 16th step (the first among them) every element is looked at, not only the sampled positions; a
    # float16 gradient of large finite values (its sum overflows) is finite
    def run(poison: bool):
        p = torch.nn.Parameter(torch.zeros(100, 100, dtype=torch.float16))
        optimizer = torch.optim.SGD([p], lr=1e-6)
        with watch(invariants_only=True) as w:
            for step in range(2):
                grad = torch.full((100, 100), 6e4, dtype=torch.float16)
                if poison and step == 0:
                    grad[37, 59] = float("inf")
                p.grad = grad
                optimizer.step()
        return [f for f in w.findings if "NaN or inf" in f.summary]

    assert run(poison=False) == []
    found = run(poison=True)
    assert sorted(f.mismatch.attribute for f in found) == ["grad_not_finite", "param_not_finite"], [f.summary for f in found]
    assert all(f.detail == "step 0" for f in found)  # the step it happened, though read a step later
    assert any(f.summary.startswith("the gradient of a parameter of shape [100, 100] in no module") for f in found)


def test_outputs_without_a_database_are_refused():
    with pytest.raises(UsageError, match="give db="):
        with watch(json="findings.json"):
            pass


def test_foreach_optimizer_calls_are_judged():
    # on CUDA Adam takes lists of tensors by default (_foreach_*): each element is a written tensor
    torch.manual_seed(0)
    model, data = models.mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    with watch() as w:
        for _ in range(2):
            optimizer.zero_grad()
            model(data).pow(2).mean().backward()
            optimizer.step()
    judged = {str(key[0]) for key in w.shadow.signatures}
    assert "aten._foreach_mul_.Scalar" in judged and any(name.startswith("aten._foreach_addcdiv_") for name in judged), judged
    assert not w.shadow.errors and not w.findings


def frozen_where(skip):
    """SGD whose step leaves alone the parameters ``skip`` says: a dropped write, by layout."""

    class Sgd(torch.optim.SGD):
        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None and not skip(p):
                        p.add_(p.grad, alpha=-group["lr"])

    return Sgd


@pytest.mark.parametrize("layout", ["transposed, its gradient alike", "transposed, its gradient contiguous", "every other column"])
def test_a_frozen_parameter_is_found_in_each_way_its_positions_are_read(layout):
    # a dense tensor is read as a view of its storage's grid; a gradient laid out otherwise, and a parameter that
    # does not fill its storage, through flat indices: each must still tell a frozen parameter from a moving one. The
    # gradient is nonzero in one block only, so a position read in the gradient that is not the same element in the
    # parameter would call the moving parameter frozen (a transposed [48, 64] and a contiguous gradient share no
    # storage index between the elements of this block)
    def run(plant: bool):
        torch.manual_seed(0)
        base = torch.randn(64, 48) if layout != "every other column" else torch.randn(48, 128)[:, ::2]
        weight = torch.nn.Parameter(base.t() if layout != "every other column" else base)  # [48, 64] each
        other = torch.nn.Parameter(torch.randn(64, 8))
        optimizer = frozen_where(lambda p: plant and p is weight)([weight, other], lr=0.1)
        with watch(invariants_only=True) as w:
            for _ in range(3):
                grad = torch.zeros(48, 64)
                grad[24:, :32] = torch.randn(24, 32)
                weight.grad = grad.t().contiguous().t() if layout == "transposed, its gradient alike" else grad
                other.grad = torch.randn(64, 8)
                optimizer.step()
        return [(f.mismatch.attribute, f.summary) for f in w.findings]

    assert run(plant=False) == []
    found = run(plant=True)
    assert [attribute for attribute, _ in found] == ["frozen"], found
    assert "of shape [48, 64] in no module" in found[0][1] and "did not change at Sgd.step()" in found[0][1]
