"""``torchsleuth optim`` at the edges: hyperparameter rules, names, depth, contracts, planted bugs, repro scripts.

The plants patch torch's own optimizer functions (``torch.optim.adam._multi_tensor_adam``, ...) for the length
of a test; a repro script is run with the same patch imported first (``PLANTS``) and without it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from torchsleuth.cli.main import main
from torchsleuth.errors import UsageError
from torchsleuth.optim import OptimConfig, contracts, core, edges, matrix, plan, sweep

ADAM = sys.modules["torch.optim.adam"]
SGD = sys.modules["torch.optim.sgd"]

# Each plant as the source a repro script's process imports first, and installed in this one by ``planted``.
PLANTS = {
    # the foreach path ignores lr=0 (steps with the default lr instead)
    "foreach_adam_ignores_lr_zero": """\
import sys
module = sys.modules["torch.optim.adam"]
original = module._multi_tensor_adam
def planted(*args, lr, **kwargs):
    return original(*args, lr=lr if float(lr) != 0 else 1e-3, **kwargs)
module._multi_tensor_adam = planted
""",
    # the foreach path drops maximize when amsgrad is on too
    "foreach_adam_amsgrad_maximize": """\
import sys
module = sys.modules["torch.optim.adam"]
original = module._multi_tensor_adam
def planted(*args, amsgrad, maximize, **kwargs):
    return original(*args, amsgrad=amsgrad, maximize=maximize and not amsgrad, **kwargs)
module._multi_tensor_adam = planted
""",
    # every SGD path takes a tensor lr twice over (a shared bug: the implementations agree with each other)
    "sgd_doubles_tensor_lr": """\
import sys
import torch
module = sys.modules["torch.optim.sgd"]
for name in ("_single_tensor_sgd", "_multi_tensor_sgd"):
    def planted(*args, lr, _original=getattr(module, name), **kwargs):
        return _original(*args, lr=lr * 2 if isinstance(lr, torch.Tensor) else lr, **kwargs)
    setattr(module, name, planted)
""",
    # the for-loop Adam divides 0 by 0 when every gradient is zero (eps dropped)
    "forloop_adam_zero_gradient_nan": """\
import sys
module = sys.modules["torch.optim.adam"]
original = module._single_tensor_adam
def planted(params, grads, *args, eps, **kwargs):
    zero = all(not bool(g.any()) for g in grads)
    return original(params, grads, *args, eps=0.0 if zero else eps, **kwargs)
module._single_tensor_adam = planted
""",
}


@pytest.fixture
def planted(monkeypatch):
    """Install a plant of ``PLANTS`` in this process until the test ends."""

    def install(name: str) -> None:
        for module in (ADAM, SGD):
            for attribute in ("_multi_tensor_adam", "_single_tensor_adam", "_single_tensor_sgd", "_multi_tensor_sgd"):
                if hasattr(module, attribute):
                    monkeypatch.setattr(module, attribute, getattr(module, attribute))  # restored at teardown
        exec(compile(PLANTS[name], name, "exec"), {})

    return install


def run_script(path, plant: str | None, tmp_path) -> subprocess.CompletedProcess:
    if plant is None:
        return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    (tmp_path / "edge_plant.py").write_text("import torch\n" + PLANTS[plant])
    code = (f"import sys, runpy; sys.path.insert(0, {str(tmp_path)!r}); import torch, edge_plant; "
            f"runpy.run_path({str(path)!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def config(**changes) -> OptimConfig:
    """A small run: float32, contiguous parameters, for-loop and foreach."""
    chosen = dict(dtypes=("float32",), layouts=("contiguous",), implementations=("forloop", "foreach"), budget=0)
    chosen.update(changes)
    return OptimConfig(**chosen)


# --- rules and names -------------------------------------------------------------------------


def test_values_follow_each_hyperparameters_name_and_default():
    adam = {h.name: h for h in edges.hyperparameters(matrix.spec("Adam"))}
    assert list(adam) == ["lr", "betas[0]", "betas[1]", "eps", "weight_decay"]
    assert (adam["lr"].rule, adam["lr"].values, adam["lr"].tensor) == ("scale", (0.0, 1e-8, 10.0, 1e3), True)
    assert adam["betas[1]"].rule == "bounded" and adam["betas[1]"].values == (0.0, 1e-8, 0.5, 0.9999, 1 - 1e-8, 1.0)  # 0.999 is the default
    assert adam["betas[0]"].tensor and not adam["eps"].tensor  # torch documents lr and betas as tensors, eps not
    assert adam["weight_decay"].values == (1e-8, 10.0, 1e3)
    sgd = {h.name: h for h in edges.hyperparameters(matrix.spec("SGD"))}
    assert sgd["momentum"].rule == sgd["dampening"].rule == "bounded" and sgd["lr"].tensor and not sgd["momentum"].tensor
    adafactor = {h.name: h for h in edges.hyperparameters(matrix.spec("Adafactor"))}
    assert adafactor["beta2_decay"].values == (0.0, -1e-8, -10.0, -1e3)  # the sign of a negative default
    assert "eps[0]" not in adafactor and adafactor["eps[1]"].rule == "scale"  # None has no range
    muon = {h.name: h for h in edges.hyperparameters(matrix.spec("Muon"))}
    assert muon["ns_steps"].rule == "count" and muon["ns_steps"].values == (0, 1, 10)
    assert "max_iter" not in {h.argument for h in edges.hyperparameters(matrix.spec("LBFGS"))}  # fixed by the matrix


def test_names_are_canonical_and_rebuild_their_setting():
    adam = matrix.spec("Adam")
    option = edges.parse(adam, "maximize+betas[1]=0.9999+amsgrad+lr=0+betas:tensor")
    assert option.name == "lr=0+betas[1]=0.9999+betas:tensor+amsgrad+maximize"
    assert dict(option.kwargs) == {"lr": 0.0, "betas": (core.AsTensor(0.9), core.AsTensor(0.9999)), "amsgrad": True, "maximize": True}
    assert edges.parse(adam, option.name) == option and edges.parse(adam, "amsgrad") == adam.option("amsgrad")
    assert edges.parse(adam, "default") == adam.option("default")
    assert edges.number_form(adam, option).name == "lr=0+betas[1]=0.9999+amsgrad+maximize"
    assert dict(edges.parse(matrix.spec("SGD"), "dampening=0.5").kwargs) == {"dampening": 0.5, "momentum": 0.9}  # its companion
    materialized = core.materialize(dict(option.kwargs))
    assert isinstance(materialized["betas"][1], torch.Tensor) and materialized["betas"][1].dim() == 0


@pytest.mark.parametrize(("name", "words"), [
    ("lrr=0", "unknown hyperparameter 'lrr' of Adam"),
    ("lr=fast", "bad value 'fast' for lr of Adam: expected a number"),
    ("betas[2]=0.5", "has no element betas[2]"),
    ("nesterov", "unknown option 'nesterov' of Adam"),
])
def test_bad_names_say_what_is_wrong(name, words):
    with pytest.raises(UsageError, match=words.replace("[", r"\[").replace("]", r"\]")):
        edges.parse(matrix.spec("Adam"), name)


def test_combinations_cover_every_flag_pair_with_an_edge_and_lr_zero():
    adam = matrix.spec("Adam")
    chosen = plan.settings(adam, config())
    names = {o.name for o in chosen.options}
    assert {"lr=0+amsgrad+maximize", "lr=0+amsgrad+maximize+decoupled_weight_decay", "lr:tensor", "betas[1]=0.9999"} <= names
    pairs = [n for n in names if "amsgrad+maximize" in n and "lr=0" not in n]
    assert pairs, names  # a flag pair with one seeded edge value
    assert not any("capturable" in n for n in names if "+" in n)  # not on the CPU: its step refuses it
    assert dict(chosen.refused)["betas[0]=1"].startswith("ValueError: Invalid beta parameter")
    assert chosen.taken == chosen.edges == len(chosen.options) - len(adam.options)


def test_depth_pointed_takes_every_edge_catalog_a_seeded_sample_with_lr_zero_first():
    adam = matrix.spec("Adam")
    deep = plan.depth(OptimConfig(), deep=True)
    catalog = plan.depth(OptimConfig(), deep=False)
    assert (deep.budget, catalog.budget) == (0, matrix.CATALOG_BUDGET)
    sampled = plan.settings(adam, catalog)
    taken = [o.name for o in sampled.options if o not in adam.options]
    assert len(taken) == matrix.CATALOG_BUDGET == sampled.taken < sampled.edges and taken[0] == "lr=0"
    assert taken == [o.name for o in plan.settings(adam, catalog).options if o not in adam.options]  # seeded
    notes = plan.notes([adam], catalog)
    said = next(n for n in notes if n.startswith(f"Adam: a sample of {matrix.CATALOG_BUDGET} (seed 0) of {sampled.edges} edge settings"))
    assert said.endswith(": " + ", ".join(taken)) and "its constructor refuses" in said


def test_contracts_hold_by_rule_and_exclusions_name_their_reason():
    adam, adamw, rprop, asgd = (matrix.spec(n) for n in ("Adam", "AdamW", "Rprop", "ASGD"))
    assert contracts.lr_zero(adam, edges.parse(adam, "lr=0+lr:tensor")) == ""
    assert "clamped" in contracts.lr_zero(rprop, edges.parse(rprop, "lr=0"))
    assert contracts.zero_gradient(adam, adam.option("default"), "float32") == ""
    assert "0 in float16" in contracts.zero_gradient(adam, adam.option("default"), "float16")
    assert "0/0" in contracts.zero_gradient(adam, edges.parse(adam, "eps=0"), "float32")
    assert "weight_decay=0.01" in contracts.zero_gradient(adamw, adamw.option("default"), "float32")
    assert contracts.zero_gradient(adamw, edges.parse(adamw, "weight_decay=0"), "float32") == ""
    assert "lambd" in contracts.zero_gradient(asgd, asgd.option("default"), "float32")


# --- planted bugs ----------------------------------------------------------------------------


@pytest.mark.slow
def test_planted_lr_zero_ignored_by_foreach_breaks_the_contract_and_its_script_shows_it(planted, tmp_path):
    planted("foreach_adam_ignores_lr_zero")
    result = sweep(config(optimizers=("Adam",), options=("lr=0", "lr=0+amsgrad")), db=str(tmp_path / "runs.db"), out=tmp_path)
    broken = [f for f in result.findings if f.kind == "invariant"]
    assert {f.case_id for f in broken} == {"Adam|foreach|float32|cpu|s0|contiguous|option:lr=0",
                                           "Adam|foreach|float32|cpu|s0|contiguous|option:lr=0+amsgrad"}
    example = next(f for f in broken if f.case_id.endswith("option:lr=0"))
    assert example.reference == "contract" and example.op == "torch.optim.Adam" and example.variant == "foreach"
    assert "option lr=0" in example.summary and "lr_zero contract" in example.summary and "weight moved" in example.summary
    assert not [f for f in result.findings if f.variant == "forloop"]
    path = tmp_path / "repros" / f"{example.id}.py"
    assert "'lr': 0.0" in path.read_text() and "'foreach': True" in path.read_text()
    with_plant = run_script(path, "foreach_adam_ignores_lr_zero", tmp_path)
    assert with_plant.returncode == 1 and "BUG PRESENT" in with_plant.stdout, with_plant.stdout + with_plant.stderr
    without = run_script(path, None, tmp_path)
    assert without.returncode == 0 and "fixed" in without.stdout, without.stdout + without.stderr


def test_planted_amsgrad_with_maximize_is_found_by_a_deep_run_through_the_combinations(planted, tmp_path):
    planted("foreach_adam_amsgrad_maximize")
    result = sweep(config(optimizers=("Adam",)), db=str(tmp_path / "runs.db"))
    wrong = {f.case_id.split("option:")[-1] for f in result.findings if f.variant == "foreach"}
    assert wrong and all("amsgrad" in name and "maximize" in name for name in wrong), wrong
    assert any(name.startswith("lr=0+") for name in wrong) and any(not name.startswith("lr=0") for name in wrong)
    example = next(f for f in result.findings if f.reference == "layout")
    assert example.kind == "mismatch" and "amsgrad" in example.summary and "maximize" in example.summary
    assert not [f for f in result.findings if f.variant == "forloop"]


@pytest.mark.slow
def test_planted_tensor_lr_shared_by_every_path_is_caught_by_the_tensor_form_contract(planted, tmp_path):
    planted("sgd_doubles_tensor_lr")
    result = sweep(config(optimizers=("SGD",), options=("lr:tensor", "lr=10+lr:tensor", "lr=0+lr:tensor", "default")),
                   db=str(tmp_path / "runs.db"), out=tmp_path)
    # the implementations agree with each other: only the contract sees it, on the for-loop run of each tensor setting
    assert {(f.variant, f.reference, f.case_id.split("option:")[-1]) for f in result.findings} == {
        ("forloop", "contract", "lr:tensor"), ("forloop", "contract", "lr=10+lr:tensor")}
    example = next(f for f in result.findings if f.case_id.endswith("option:lr:tensor"))
    assert example.kind == "mismatch" and "numbers for the tensors (default)" in example.summary
    path = tmp_path / "repros" / f"{example.id}.py"
    assert "AsTensor(value=0.001)" in path.read_text()
    assert run_script(path, "sgd_doubles_tensor_lr", tmp_path).returncode == 1
    assert run_script(path, None, tmp_path).returncode == 0


@pytest.mark.slow
def test_planted_nan_at_zero_gradients_breaks_the_zero_gradient_contract(planted, tmp_path):
    planted("forloop_adam_zero_gradient_nan")
    result = sweep(config(optimizers=("Adam",), options=("default",)), db=str(tmp_path / "runs.db"), out=tmp_path)
    (found,) = result.findings
    assert found.case_id == "Adam|forloop|float32|cpu|s0|contiguous|grad:zero" and found.kind == "invariant"
    assert "zero_gradient contract" in found.summary and "zero gradients" in found.summary
    path = tmp_path / "repros" / f"{found.id}.py"
    assert run_script(path, "forloop_adam_zero_gradient_nan", tmp_path).returncode == 1
    assert run_script(path, None, tmp_path).returncode == 0


# --- clean runs and the command line ---------------------------------------------------------------


@pytest.mark.slow
def test_a_deep_run_over_real_optimizers_stays_clean(tmp_path):
    """Every edge setting and contract of Adam and SGD (float32 and bfloat16, contiguous and transposed, no fused)."""
    result = sweep(config(optimizers=("Adam", "SGD"), dtypes=("float32", "bfloat16"), layouts=("contiguous", "transposed")),
                   db=str(tmp_path / "runs.db"))
    assert not result.findings, [f.summary for f in result.findings]
    assert result.cases > 600 and set(result.statuses) <= {"pass", "skip"}


@pytest.mark.slow
def test_a_catalog_run_over_every_optimizer_stays_clean(tmp_path):
    """Every optimizer, a sample of its edges and its contracts, float32 contiguous (where torch 2.13 has no bug of its own)."""
    result = sweep(config(implementations=matrix.IMPLEMENTATIONS, budget=matrix.CATALOG_BUDGET), db=str(tmp_path / "runs.db"))
    assert not result.findings, [f.summary for f in result.findings]
    assert any("zero gradients" in c or "grad:zero" in c for c in _case_ids(tmp_path / "runs.db"))


def _case_ids(db) -> list[str]:
    import sqlite3

    with sqlite3.connect(db) as connection:
        return [row[0] for row in connection.execute("select case_id from outcomes")]


@pytest.mark.parametrize(("argv", "words"), [
    (["--optimizers", "Adam", "--options", "lrr=0"], ["unknown hyperparameter 'lrr' of Adam", "betas[1]"]),
    (["--optimizers", "Adam", "--options", "lr=fast"], ["bad value 'fast' for lr of Adam"]),
    (["--optimizers", "Adam", "--options", "lr=-1"], ["bad value in --options 'lr=-1'", "Invalid learning rate"]),
    (["--optimizers", "Adam,SGD", "--options", "rho=0.5"], ["no selected optimizer takes 'rho=0.5'"]),
])
def test_bad_settings_on_the_command_line_are_one_line_and_exit_2(argv, words, capsys, tmp_path):
    status = main(["optim", "--out", str(tmp_path), *argv])
    error = capsys.readouterr().err.strip()
    assert status == 2 and len(error.splitlines()) == 1, error
    for word in words:
        assert word in error


def test_budget_must_be_a_count(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["optim", "--budget", "many"])
    assert exit_.value.code == 2 and "--budget" in capsys.readouterr().err


def rprop_freezes(eta_minus: float) -> bool:
    """Whether float32 Rprop with ``etas[0]=eta_minus`` leaves a parameter where it was (torch 2.13: when it rounds to 1)."""
    p = torch.zeros(4)
    optimizer = torch.optim.Rprop([p], lr=0.01, etas=(eta_minus, 1.2))
    for _ in range(3):
        p.grad = torch.ones(4)
        optimizer.step()
    return bool((p == 0).all())


def test_a_pointed_command_goes_deep_and_says_so(tmp_path, capsys):
    status = main(["optim", "--optimizers", "Rprop", "--dtypes", "float32", "--layouts", "contiguous", "--no-progress",
                   "--out", str(tmp_path), "--json", str(tmp_path / "f.json")])
    out = " ".join(capsys.readouterr().out.split())
    spec = matrix.spec("Rprop")
    chosen = plan.settings(spec, plan.depth(config(optimizers=("Rprop",), implementations=matrix.IMPLEMENTATIONS), deep=True))
    assert f"Rprop: every one of {chosen.edges} edge settings" in out
    assert "the lr=0 contract is not judged" in out
    # torch's own bug, checked directly: Rprop tells a sign flip by its multiplier's value, and etaminus rounds to 1 in float32
    found = {f["case_id"] for f in json.loads((tmp_path / "f.json").read_text())["findings"]}
    frozen = rprop_freezes(1 - 1e-8)
    assert found == ({f"Rprop|{i}|float32|cpu|s0|contiguous|option:etas[0]=0.99999999" for i in ("forloop", "foreach")} if frozen else set())
    assert status == (1 if frozen else 0)
