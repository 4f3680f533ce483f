"""The notes a report shows: what the run said about itself, the per-unit counts summed into one line each.

The search's budget (``search RAN/PLANNED`` a unit), the time target (``time LEFT/PLANNED``: run.deadline), the dtype
probes, and the compiled variant's sample and refusals; every other note as the run stored it.
"""

from __future__ import annotations


def run_notes(notes, config: dict, raised: dict[str, int]) -> tuple[tuple[str, str], ...]:
    """Every note of a run, as a report shows them (``raised``: the reasons of its ``raised`` outcomes, counted)."""
    return _notes(notes) + _timed(notes, config) + _compiled(config, raised)


def _notes(notes) -> tuple[tuple[str, str], ...]:
    """The run's notes, the search's per-unit counts ("UNIT RAN/PLANNED") summed into one, the dtype probes counted."""
    kept, ran, planned, units = [], 0, 0, 0
    probed = {}  # unit -> "accepted" or "refused" (run.probe): once each, though a resumed unit says it again
    for kind, detail in notes:
        if kind == "probe":
            probed[detail.rpartition(" ")[0]] = detail.rpartition(" ")[2]
            continue
        if kind in ("time", "time-after"):
            continue
        if kind != "search":
            kept.append((kind, detail))
            continue
        done, _, of = detail.rpartition(" ")[2].partition("/")
        ran, planned, units = ran + int(done), planned + int(of), units + 1
    if units:
        kept.append(("search", f"the budget left searched cases out in {units} op-and-dtype units: {ran:,} of their {planned:,} planned ran "
                               "(every one in the others); --budget 0 runs them all"))
    if probed:
        accepted = sum(how == "accepted" for how in probed.values())
        kept.append(("probe", f"{len(probed)} op-and-dtype units in dtypes OpInfo does not declare: {accepted} swept (the kernel took the "
                              f"dtype), {len(probed) - accepted} refused (a skip each)"))
    return tuple(kept)


def _timed(notes, config: dict) -> tuple[tuple[str, str], ...]:
    """What the run's time target left out: the units' ``time LEFT/PLANNED`` notes (run.deadline), summed, and what
    the shrink stage left (``time-after``: findings kept as found, groups undiagnosed; shrink.stage)."""
    left, planned, units = 0, 0, set()
    after: dict[str, tuple[int, int]] = {}
    for kind, detail in notes:
        if kind == "time":
            unit, _, counts = detail.rpartition(" ")
            out, _, of = counts.partition("/")
            left, planned = left + int(out), planned + int(of)
            units.add(unit)
        elif kind == "time-after":
            stage, _, counts = detail.partition(" ")
            out, _, of = counts.partition("/")
            after[stage] = (int(out), int(of))  # a resumed run's says it again: the last
    target = config.get("time_target") or 0
    said = []
    if units:
        said.append(("time", f"the time target ({target:g} s) left out {left:,} of the {planned:,} oracle and searched cases of "
                             f"{len(units)} op-and-dtype unit(s) that came after its sweep's share of it ran out; every sample's own "
                             "cases ran; --time 0 runs them all"))
    words = {"shrinking": "finding(s) unshrunk (each kept as found: its repro script is the case that failed)",
             "diagnosing": "group(s) undiagnosed"}
    after = {stage: counts for stage, counts in after.items() if counts[0]}  # a resumed run's last said none was left
    if after:
        parts = [f"{out:,} of {of:,} {words.get(stage, stage)}" for stage, (out, of) in after.items()]
        said.append(("time", f"the time target ({target:g} s) ran out while shrinking and diagnosing: {' and '.join(parts)}; "
                             "--time 0 shrinks and diagnoses them all"))
    return tuple(said)


# How the compile oracle's compiled variant words a case torch.compile refused (oracles/compile/variant.py).
COMPILE_RAISED = "torch.compile raised"


def _compiled(config: dict, raised: dict[str, int]) -> tuple[tuple[str, str], ...]:
    """The compiled variant's notes: that a pointed run sampled it, and every case torch.compile refused (loud: a
    ``raised`` outcome, not a finding), counted and listed."""
    notes = []
    if "compile:sampled" in (config.get("oracles") or ()):
        notes.append(("compile", "the compiled variant was sampled: at most 28 compiled cases per op (an all-pairs cover of "
                                 "layout x dtype x variant, and 4 searched cases), each judged like its eager case, and at most 12 compiled "
                                 "chains of 2 to 4 ops around it; --compile for every sample's "
                                 "contiguous call too, --no-compile for none"))
    if "compile:catalog" in (config.get("oracles") or ()):
        notes.append(("compile", "the compiled variant within the catalog's budget: 4 compiled cases per op (a share of the "
                                 "all-pairs cover of layout x dtype x variant, turned by the op), 1 searched case and 1 compiled chain; "
                                 "a pointed run (--ops NAME) compiles up to 28 cases and 12 chains an op"))
    failed = sorted(((n, reason) for reason, n in raised.items() if reason.startswith(COMPILE_RAISED)), key=lambda row: (-row[0], row[1]))
    if failed:
        listed = "; ".join(f"{reason} ({n})" if n > 1 else reason for n, reason in failed)
        notes.append(("compile", f"{sum(n for n, _ in failed)} compiled case(s) raised in torch.compile (loud, not findings): {listed}"))
    return tuple(notes)
