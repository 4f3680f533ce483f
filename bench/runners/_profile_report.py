"""sweep_profile.py's report: profile.md from profile.json's record."""

from __future__ import annotations

import collections

from _phases import GROUPS, ORACLE_GROUP, OTHER, ROWS, group_of


def _unit(key: str) -> str:
    """A unit key (``op|dtype|device``) for a Markdown cell, where ``|`` would split it."""
    op, dtype, _ = key.split("|")
    return f"{op} {dtype}"


def _counts(counter: dict) -> str:
    return ", ".join(f"{count:,} {name}" for name, count in sorted(counter.items(), key=lambda kv: -kv[1]))


def _ops(ops: list) -> str:
    return ", ".join(ops) if len(ops) <= 12 else f"{', '.join(ops[:6])}, ..., {ops[-1]}"


def _us(seconds: float, cases: int) -> str:
    return f"{1e6 * seconds / cases:,.0f}" if cases else "-"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def render(report: dict) -> str:
    meta, part1 = report["meta"], report["in_process"]
    lines = [
        f"# Where a sweep's time goes: {meta['device']} ({meta['device_name']})",
        "",
        "```sh",
        meta["command"],
        "```",
        "",
        f"torch {meta['torch']}, Python {meta['python']}, torchsleuth {meta['torchsleuth']}, {meta['cores']} CPU cores "
        f"(of {meta['cpu_count']}), {meta['machine']}, {meta['date']}. Config: {meta['config']}. Load average (1 min) before "
        f"each part: {', '.join(f'{name} {load:.1f}' for name, load in meta['load'])}.",
        "",
        "## In one process, per case",
        "",
    ]
    cases, wall = part1["cases"], part1["wall"]
    totals = part1["totals"]
    ran = len(part1["unit_times"])
    how_far = "to the end of the plan" if part1["finished"] else f"until the budget of {report['args']['seconds']:g} s was spent"
    lines += [
        f"{len(report['ops'])} ops ({report['ops_rule']}: {_ops(report['ops'])}); {ran} of their {part1['units']} units run in a seeded "
        f"shuffled order, {how_far}: {cases:,} cases in {wall:.1f} s of measured wall time, {cases / wall if wall else 0:.0f} cases/s in one "
        f"process with {meta['threads']} intra-op thread ({_counts(part1['statuses'])}). The process had {part1['cpu']:.1f} s of CPU in "
        f"that time ({_pct(part1['cpu'], wall)} of the wall: below 100% it waited, for the device or for a CPU others held). "
        f"{part1['processes']} process(es)" + (f"; {len(part1['restarts'])} restart(s): " + "; ".join(part1["restarts"][:6])
                                              + (" ..." if len(part1["restarts"]) > 6 else "") if part1["restarts"] else "") + ".",
        "",
        "A phase's time is the time inside its functions minus the time inside any other phase's functions they call; "
        "`other` is the time inside none, so the rows add up to the wall time. Timers add about "
        f"{report['timer_overhead_us']:.2f} µs per wrapped call, {report['timer_overhead_share']:.1%} of the wall time, "
        "spread over the rows." + (f" Not in this tree, so not timed (their time is their caller's): {', '.join(part1['missing'])}."
                                   if part1["missing"] else ""),
        "",
        "| group | µs per case | share |",
        "| --- | ---: | ---: |",
    ]
    groups = collections.Counter()
    for name, seconds in totals.items():
        groups[group_of(name)] += seconds
    for group in (*GROUPS, OTHER):
        lines.append(f"| {group} | {_us(groups[group], cases)} | {_pct(groups[group], wall)} |")
    lines += [f"| **total (measured wall)** | **{_us(wall, cases)}** | **{_pct(sum(totals.values()), wall)}** |", ""]
    lines += ["| phase | group | µs per case | share | calls per case | what it is |", "| --- | --- | ---: | ---: | ---: | --- |"]
    described = {name: (group, text) for name, group, text in ROWS}
    oracle_rows = sorted(name for name in totals if name.startswith("oracle: "))
    for name in (*described, *oracle_rows, OTHER):
        group, text = described.get(name, (ORACLE_GROUP, "Registry.run: the oracle's own work on its cases") if name != OTHER
                                      else (OTHER, "the engine's loop and glue, outside every phase above"))
        seconds = totals.get(name, 0.0)
        calls = part1["calls"].get(name, 0)
        lines.append(f"| {name} | {group} | {_us(seconds, cases)} | {_pct(seconds, wall)} | "
                     f"{calls / cases if cases and name != OTHER else 0:.2f} | {text} |")
    lines += [f"| **total** | | **{_us(sum(totals.values()), cases)}** | **{_pct(sum(totals.values()), wall)}** | | rows summed; "
              f"the clock around the window: {wall:.2f} s |", ""]
    if part1["sync_by_caller"]:
        device_syncs = sum(part1["sync_calls"].values())
        lines += [f"Device synchronizations (`call.synchronize` off the CPU; implicit ones, `.cpu()`, `float()`, `.item()`, are "
                  f"not counted): {device_syncs / cases if cases else 0:.2f} per case, by the phase that called it:", "",
                  "| caller | µs per case | share | per case |", "| --- | ---: | ---: | ---: |"]
        for caller, seconds in sorted(part1["sync_by_caller"].items(), key=lambda kv: -kv[1]):
            lines.append(f"| {caller} | {_us(seconds, cases)} | {_pct(seconds, wall)} | {part1['sync_calls'].get(caller, 0) / cases:.2f} |")
        lines.append("")
    lines += ["Cases by kind (seconds inside the case's own run, `Outcome.seconds`: its references included when it is the "
              "first case of its sample to ask for them; no planning, store or pipe):", "",
              "| kind | cases | share of cases | µs per case | share of case time |", "| --- | ---: | ---: | ---: | ---: |"]
    inside = sum(s for _, s in part1["kinds"].values())
    for kind, (count, seconds) in sorted(part1["kinds"].items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {kind} | {count:,} | {_pct(count, cases)} | {_us(seconds, count)} | {_pct(seconds, inside)} |")
    lines += ["", "Longest units in one process, and the ops that took most of the time:", "",
              "| unit | seconds | cases |", "| --- | ---: | ---: |"]
    for key, seconds, count in sorted(part1["unit_times"], key=lambda u: -u[1])[:8]:
        lines.append(f"| {_unit(key)} | {seconds:.2f} | {count} |")
    by_op = collections.defaultdict(lambda: [0.0, 0])
    for key, seconds, count in part1["unit_times"]:
        by_op[key.split("|")[0]][0] += seconds
        by_op[key.split("|")[0]][1] += count
    lines += ["", "| op | share of the wall time | cases | ms per case |", "| --- | ---: | ---: | ---: |"]
    for op, (seconds, count) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:8]:
        lines.append(f"| {op} | {_pct(seconds, wall)} | {count:,} | {1e3 * seconds / count if count else 0:.2f} |")
    lines += ["", "## A worker's start-up, in a fresh interpreter", ""]
    start = report["startup"]
    if "error" in start:
        lines += ["failed:", "", "```", start["error"], "```"]
    else:
        lines += ["| step | seconds |", "| --- | ---: |"]
        lines += [f"| {name} | {seconds:.2f} |" for name, seconds in start["steps"]]
        lines += [f"| **total** | **{start['total']:.2f}** |"]
    part1_startup = part1["startup_seconds"]
    if part1_startup:
        lines += ["", f"The in-process child's own start (the above, plus planning the units and importing the oracles): "
                      f"{', '.join(f'{s:.1f}' for s in part1_startup)} s."]
    lines += ["", "## The real sweep, by worker count", "",
              f"`torchsleuth.sweep.sweep`, no shrink, over {len(report['pool_ops'])} ops ({report['pool_ops_rule']}: "
              f"{_ops(report['pool_ops'])}), a fresh database each, each stopped after {report['args']['pool_seconds']:g} s (a stopped "
              "run says `cut`: its rate is over the units it reached, in the sweep's order, and it has no tail). Planned: from the call "
              "to the units planned and the run open in the store (the parent). First outcome: from the call to the first stored case "
              "(spawn, imports, the device's context, the first case). Last worker ready: when the slowest-starting worker began its "
              "first case. Worker starts: processes the pool started, the first ones and every replacement (a device lost, a crash, a "
              "hang, a crash's replay alone). Tail: from the first worker left without a unit to the last unit's end. Utilization: the "
              "units' seconds (a worker's first unit from its first case) over workers x (call to last unit's end). Worker-ms per "
              "case: workers x wall / cases, against the µs per case in one process above.", "",
              "| workers | units | cases | wall s | cases/s | worker-ms per case | planned s | first outcome s | last worker ready s | "
              "worker starts | tail s | tail share | idle worker-s in tail | utilization | parent SQLite s | parent CPU s | workers' CPU s "
              "| longest unit |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    lines += [_pool_row(run) for run in report["pool"]]
    pool_ops = set(report["pool_ops"])
    mine = [(seconds, count) for key, seconds, count in part1["unit_times"] if key.split("|")[0] in pool_ops]
    if mine:
        seconds, count = sum(m[0] for m in mine), sum(m[1] for m in mine)
        lines += ["", f"The same ops in one process (part 1 ran {len(mine)} of their units): {1e3 * seconds / count:.2f} ms per case "
                      f"({count:,} cases); worker-ms per case above it is what the pool adds: start-up, the tail, and workers "
                      "contending for CPUs (and a device)."]
    finished = [run for run in report["pool"] if run.get("tail") is not None]
    if finished:
        run = finished[-1]
        lines += ["", f"Stragglers at {run['workers']} workers: the units still running after the first worker went idle "
                      f"at {run['first_idle']:.1f} s (the run's units ended at {run['work_end']:.1f} s):", "",
                  "| unit | seconds | began at s |", "| --- | ---: | ---: |"]
        lines += [f"| {_unit(key)} | {seconds:.2f} | {began:.1f} |" for key, seconds, began in run["stragglers"][:10]]
    lines.append("")
    return "\n".join(lines)


def _pool_row(run: dict) -> str:
    def number(value, spec=".1f"):
        return "-" if value is None else format(value, spec)

    tail, cases, wall = run.get("tail"), run["cases"], run["wall"]
    longest = f"{_unit(run['unit_seconds'][0][0])} {run['unit_seconds'][0][1]:.1f} s" if run["unit_seconds"] else "-"
    cells = [
        run["workers"], f"{run['units_done']}/{run['units']}", f"{cases:,}", f"{wall:.1f}{' cut' if run['cut'] else ''}",
        number(cases / wall if wall else None, ".0f"), number(1e3 * run["workers"] * wall / cases if cases else None),
        number(run["planned"]), number(run["first_outcome"]), number(run["workers_ready"][1] if run["workers_ready"] else None),
        run.get("worker_starts", "-"),
        number(tail), _pct(tail, run["work_end"]) if tail is not None else "-", number(run.get("idle_worker_seconds")),
        number(run.get("utilization"), ".0%"), number(run["parent_store"], ".2f"), number(run["parent_cpu"]), number(run["workers_cpu"]), longest,
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"
