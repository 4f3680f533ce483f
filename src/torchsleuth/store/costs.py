"""How long each unit took before: the order a sweep hands its units out in.

Design note. A sweep ends when its last unit does. Units are one op in one
dtype, and they differ a thousandfold: most take a second, a few take minutes
(a kernel that kills its worker costs two worker starts, 10-15 s each beside a
GPU; a case that hangs costs its timeout twice, the case and its replay
alone). Handed out in the ops' alphabetical order, a costly unit that comes
late runs alone at the end while the other workers idle. So when the store
holds earlier runs on the same kind of device (``of_store``: each unit's cases'
seconds, plus ``CRASH_SECONDS`` for each crash found and ``HANG_TIMEOUTS``
timeouts for each hang), the pool is handed the units longest first.

Except hangs off the CPU. A kernel that hangs on a GPU holds the GPU for its
timeout, and the GPU time-slices between the workers' processes: every other
worker's kernels then wait their turn behind it. Measured on one H200
(bench/cuda-sweep.md), six units with hanging cases handed out first made the
whole sweep's first five minutes do a tenth of the cases the alphabetical order
did. On an accelerator, units that hung before go last, where they slow only
the tail; on the CPU a hang holds one core, and they go first like any costly
unit.

Units with no known cost keep their order, between the known costly ones and
the known cheap ones (taken to cost ``TYPICAL_SECONDS``). The order changes no
case and no finding: only when each unit starts. A store with no earlier run
on the device (a first sweep) keeps the given order.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Iterable

from .. import devices
from ..cases.records import Case, Unit

# a hang is the case and its replay alone, each stopped at the timeout (on a shared GPU the first at a fifth of it)
HANG_TIMEOUTS = 2
# a crash is two worker starts (the crash and its replay alone); 10-15 s each beside a GPU
CRASH_SECONDS = 30.0
# what a unit with no known cost is taken to cost (a typical unit: about a second)
TYPICAL_SECONDS = 1.0
# how many of the latest runs on the device's kind are read (each whole-catalog run takes about 0.3 s to read)
LATEST_RUNS = 3


def unit_name(unit_key: str) -> str:
    """``op|dtype|device`` -> ``op|dtype``: what costs are kept by, whichever device index ran it."""
    return unit_key.rsplit("|", 1)[0]


def of_store(db, device: str) -> tuple[dict[str, float], set[str]]:
    """From the latest ``LATEST_RUNS`` ``ops`` runs in the store ``db`` (an sqlite3 connection) on this kind of device:
    ``op|dtype`` -> seconds (the latest run that has a unit gives its cost), and the units that hung in any of them."""
    kind = devices.kind(device)
    runs = [(run_id, json.loads(config or "{}").get("timeout", 60.0))
            for run_id, run_device, config in db.execute("SELECT id, device, config FROM runs WHERE command = 'ops' ORDER BY id")
            if devices.kind(run_device or "cpu") == kind][-LATEST_RUNS:]
    costs: dict[str, float] = {}
    hung: set[str] = set()
    for run_id, timeout in runs:  # later runs overwrite earlier ones
        seen: dict[str, float] = {}
        for unit, seconds in db.execute("SELECT unit, SUM(seconds) FROM outcomes WHERE run = ? GROUP BY unit", (run_id,)):
            seen[unit_name(unit)] = seconds
        for case_id, found in db.execute("SELECT case_id, kind FROM findings WHERE run = ? AND kind IN ('hang', 'crash')", (run_id,)):
            name = unit_name(Case.parse(case_id).unit.key)
            seen[name] = seen.get(name, 0.0) + (HANG_TIMEOUTS * timeout if found == "hang" else CRASH_SECONDS)
            if found == "hang":
                hung.add(name)
        costs.update(seen)
    return costs, hung


def order(units: Iterable[Unit], db, device: str) -> list[Unit]:
    """``units`` in the order to hand them out: by the store's earlier runs on this kind of device, the costliest
    first; off the CPU, units that hung last. The given order where nothing is known."""
    try:
        known, hung = of_store(db, device)
    except sqlite3.OperationalError:  # not a store yet
        known, hung = {}, set()
    if devices.kind(device) == "cpu":
        hung = set()
    return longest_first([u for u in units if unit_name(u.key) not in hung], known) + [u for u in units if unit_name(u.key) in hung]


def longest_first(units: Iterable[Unit], costs: dict[str, float]) -> list[Unit]:
    """``units`` with the costliest first; units of equal or unknown cost keep their order."""
    units = list(units)
    return sorted(units, key=lambda u: -costs.get(unit_name(u.key), TYPICAL_SECONDS))
