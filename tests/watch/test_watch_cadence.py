"""watch's invariants on a fast loop: every step at first, then as many as 2% of the step time allows (watch.cadence)."""

from __future__ import annotations

import pytest
import torch

from torchsleuth import watch
from torchsleuth.watch.cadence import MAX_EVERY, WARMUP, Cadence


class Clock:
    """A clock that moves only when told: each reading, by ``tick`` (what the checks cost), and by ``advance``."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def run(cadence: Cadence, steps: int, own: float, cost: float) -> list[int]:
    """Steps of ``own`` seconds each, whose checks (when due) take ``cost``: the steps checked."""
    checked = []
    for step in range(steps):
        if cadence.due():
            cadence.spent(cost)
            cadence.clock.now += cost
            cadence.done()
            checked.append(step)
        cadence.clock.now += own
    return checked


def test_a_slow_step_is_checked_every_time_and_the_note_says_nothing():
    cadence = Cadence(clock=Clock(0.0))
    assert run(cadence, 100, own=0.100, cost=0.001) == list(range(100))
    assert cadence.every == 1 and cadence.describe() == ""


def test_a_fast_step_is_checked_in_full_at_first_then_within_the_budget():
    cadence = Cadence(clock=Clock(0.0))
    checked = run(cadence, 300, own=0.010, cost=0.0009)  # a 10 ms step, and the checks' 0.9 ms on an H200
    assert checked[:WARMUP] == list(range(WARMUP))
    gaps = {b - a for a, b in zip(checked[WARMUP:], checked[WARMUP + 1:])}
    assert gaps == {5}, gaps  # 0.9 ms within 2% of 10 ms: one step in five
    assert cadence.every == 5 and cadence.checked == len(checked) < 300
    said = cadence.describe()
    assert f"invariants checked at {len(checked)} of 300 steps" in said and f"(one in 5 at the end; at least one in {MAX_EVERY})" in said


def test_however_costly_the_checks_a_step_is_checked_at_least_every_max_every():
    cadence = Cadence(clock=Clock(0.0))
    checked = run(cadence, 200, own=0.0001, cost=0.01)
    assert max(b - a for a, b in zip(checked, checked[1:])) == MAX_EVERY


class Freezes(torch.optim.SGD):
    """SGD that stops writing ``weight`` from step ``at`` on: a dropped write that begins late."""

    def __init__(self, params, weight, at, lr):
        super().__init__(params, lr=lr)
        self.weight, self.at, self.steps = weight, at, 0

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and not (p is self.weight and self.steps >= self.at):
                    p.add_(p.grad, alpha=-group["lr"])
        self.steps += 1


def test_a_parameter_that_freezes_late_in_a_fast_loop_is_found_within_max_every_steps():
    def train(plant: bool):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 4))
        optimizer = Freezes(model.parameters(), model[0].weight, at=40 if plant else 10**9, lr=0.01)
        data = torch.randn(8, 32)
        with watch(invariants_only=True) as w:
            w.checks.clock = Clock(0.0005)  # each reading of the clock: 0.5 ms of checks, a costly check
            for _ in range(100):
                optimizer.zero_grad()
                model(data).pow(2).mean().backward()
                optimizer.step()
        return w

    clean = train(plant=False)
    assert clean.findings == []
    (cadence,) = clean.checks.cadences.values()
    assert cadence.checked < 100 and cadence.every > 1  # the fast loop was sampled
    assert clean.checks.sampled().startswith(f"invariants checked at {cadence.checked} of 100 steps")
    found = train(plant=True)
    assert [(f.mismatch.attribute, f.mismatch.path) for f in found.findings] == [("frozen", "0.weight")], found.findings
    step = int(found.findings[0].detail.removeprefix("step "))
    assert 40 <= step < 40 + MAX_EVERY, step


def test_two_optimizers_stepping_in_turn_are_each_checked():
    # each optimizer has its cadence: one count of steps for both would check only one of them whenever it
    # checks one step in an even number
    def train(plant: bool):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 4))
        first = torch.optim.SGD(model[0].parameters(), lr=0.01)
        second = Freezes(model[1].parameters(), model[1].weight, at=40 if plant else 10**9, lr=0.01)
        data = torch.randn(8, 32)
        with watch(invariants_only=True) as w:
            w.checks.clock = Clock(0.0005)
            for _ in range(100):
                first.zero_grad()
                second.zero_grad()
                model(data).pow(2).mean().backward()
                first.step()
                second.step()
        return w

    assert train(plant=False).findings == []
    found = train(plant=True)
    assert [(f.mismatch.attribute, f.mismatch.path) for f in found.findings] == [("frozen", "1.weight")], found.findings
    assert len(found.checks.cadences) == 2 and all(c.steps == 100 and c.checked < 100 for c in found.checks.cadences.values())


@pytest.mark.slow
def test_all_steps_checks_every_step_of_a_fast_loop_and_finds_a_write_dropped_at_one_step(tmp_path):
    # a write dropped at one step only, past the first 16: the cadence may pass over it; --all-steps does not
    class DropsOnce(torch.optim.SGD):
        steps = 0

        @torch.no_grad()
        def step(self, closure=None):
            if self.steps != 37:
                super().step(closure)
            self.steps += 1

    def train(all_steps: bool):
        torch.manual_seed(0)
        model = torch.nn.Linear(32, 4)
        optimizer = DropsOnce(model.parameters(), lr=0.01)
        with watch(invariants_only=True, all_steps=all_steps) as w:
            w.checks.clock = Clock(0.0005)
            for _ in range(60):
                optimizer.zero_grad()
                model(torch.randn(8, 32)).pow(2).mean().backward()
                optimizer.step()
        return w

    every = train(all_steps=True)
    (cadence,) = every.checks.cadences.values()
    assert cadence.checked == 60 and every.checks.sampled() == ""
    assert {(f.mismatch.attribute, f.detail) for f in every.findings} == {("frozen", "step 37")}
    sampled = train(all_steps=False)
    assert sampled.checks.sampled().startswith("invariants checked at ")  # the note says the steps were sampled
    # and the CLI takes the flag
    script = tmp_path / "loop.py"
    script.write_text("import torch\nm = torch.nn.Linear(4, 2)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "for _ in range(40):\n    o.zero_grad(); m(torch.randn(3, 4)).sum().backward(); o.step()\n")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "torchsleuth.cli.main", "watch", "--invariants-only", "--all-steps",
                           "--out", str(tmp_path / "out"), str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "40 optimizer steps" in done.stdout and "invariants checked at" not in done.stdout


def test_a_step_that_calls_its_parent_s_step_is_one_step():
    # torch hooks the step of each optimizer class that made an instance: a subclass's step calling SGD's runs the
    # hooks twice, nested; watch counts and checks it once
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)  # SGD.step hooked

    class Mine(torch.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)

    model = torch.nn.Linear(4, 2)
    optimizer = Mine(model.parameters(), lr=0.1)
    with watch(invariants_only=True) as w:
        for _ in range(5):
            optimizer.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            optimizer.step()
    (cadence,) = w.checks.cadences.values()
    assert w.context.step == 5 and cadence.steps == 5 and cadence.checked == 5 and w.findings == []


def test_a_step_that_raised_does_not_stop_the_checks_of_the_steps_after_it():
    # a step whose optimizer raised never ran its post-step hooks; the program caught it and trains on: the steps
    # after it are still checked (a write dropped from step 6 on is found)
    class RaisesOnce(Freezes):
        def step(self, closure=None):
            if self.steps == 3:
                self.steps += 1
                raise RuntimeError("a step that fails once")
            return super().step(closure)

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = RaisesOnce(model.parameters(), model.weight, at=6, lr=0.1)
    with watch(invariants_only=True) as w:
        for _ in range(10):
            optimizer.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            try:
                optimizer.step()
            except RuntimeError:
                pass
    assert [(f.mismatch.attribute, f.detail) for f in w.findings] == [("frozen", "step 5")], w.findings
