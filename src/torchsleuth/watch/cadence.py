"""Which optimizer steps watch's invariants check: every one at first, then as many as a small share of the time allows.

Design note. The step checks (watch.invariants) cost a fixed few dozen small
operations a checked step, whatever the model: about 0.2-0.3 ms on a CPU and
about 1 ms beside an H200 (bench/watch-overhead.md). Against a real model's
step that is nothing, but a small model on a GPU steps in 1.5 ms, and
checking every one of its steps cost it half again. What the checks catch
does not go away between steps: a frozen parameter stays frozen, an
unwritten state stays zero, a NaN spreads into the parameters and stays
there. So every step of the first ``WARMUP`` is checked, and after them the
checks keep their cost within ``BUDGET`` (2%) of the program's own time
between steps (its time with the checks' taken out, both smoothed): a step
is checked every ``every`` steps, at least every ``MAX_EVERY``-th, so what a
check finds is found at most that many steps late (each finding names the
step it was found at). Each optimizer has its own cadence (two that step in
turn are each checked). A step slower than about 50 times the checks' cost
(10-15 ms on a CPU, 50 ms beside a GPU) is checked every time. The run's
note says how many steps were checked when not all were; ``all_steps``
(``watch --all-steps``) checks every one. The clock is a parameter so that
the choice can be tested without timing anything.
"""

from __future__ import annotations

import math
import time
from typing import Callable

# Every step of the first WARMUP is checked (a short script, or the start of a long one, is checked in full).
WARMUP = 16
# After them, the checks may take this share of the program's own time between steps ...
BUDGET = 0.02
# ... but a step is checked at least every MAX_EVERY-th.
MAX_EVERY = 32
SMOOTHING = 0.2  # the weight of the latest measure in the running figures


class Cadence:
    def __init__(self, clock: Callable[[], float] = time.perf_counter, all_steps: bool = False):
        self.clock, self.all_steps = clock, all_steps  # all_steps: every step is due
        self.every = 1  # a step is checked every this many, now
        self.checked = 0  # steps checked so far
        self.steps = 0  # steps seen so far
        self._next = 0  # the next step to check
        self._began: float | None = None  # when the last step's hooks began
        self._spent = 0.0  # the checks' seconds since then
        self._own: float | None = None  # the program's own seconds between steps, smoothed
        self._cost: float | None = None  # the checks' seconds on a checked step, smoothed

    def due(self) -> bool:
        """Called as a step begins (before the optimizer's): whether its checks run."""
        now = self.clock()
        if self._began is not None:
            self._own = _smoothed(self._own, max(now - self._began - self._spent, 0.0))
        self._began, self._spent = now, 0.0
        self.steps += 1
        return self.steps - 1 >= self._next

    def spent(self, seconds: float) -> None:
        """The checks took ``seconds`` more of this step."""
        self._spent += seconds

    def done(self) -> None:
        """Called when a checked step's checks are done: chooses when the next runs."""
        step = self.steps - 1
        self.checked += 1
        self._cost = _smoothed(self._cost, self._spent)
        if self.all_steps or step + 1 < WARMUP or not self._own:
            self.every = 1
        else:
            self.every = min(MAX_EVERY, max(1, math.ceil(self._cost / (BUDGET * self._own))))
        self._next = step + self.every

    def describe(self) -> str:
        """What was checked, for the run's note: empty when every step was."""
        return sampling(self.checked, self.steps, self.every)


def sampling(checked: int, steps: int, every: int) -> str:
    """The note's words for ``checked`` steps of ``steps``, one in ``every`` at the end; empty when every step was."""
    if checked >= steps:
        return ""
    return (f"invariants checked at {checked} of {steps} steps: each of the first {WARMUP}, then as many as kept "
            f"their cost within {BUDGET:.0%} of the program's own step time (one in {every} at the end; at least "
            f"one in {MAX_EVERY})")


def _smoothed(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new
