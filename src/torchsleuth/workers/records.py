"""What a pool is handed and reports through: the work, the settings, the callbacks, a unit in flight (records, no behaviour)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


def _one(case_id: str) -> float:
    return 1.0


@dataclass(frozen=True, kw_only=True)
class Work:
    """What a pool runs, and what it may know of a unit's cases: by id only, nothing of what a case computes."""

    run: Callable  # run(unit, config, skip, only) -> events: ("begin", id), ("outcome", o), ("call", spec), ("note", text)
    describe: Callable | None = None  # describe(unit, config, case_id) -> the call a case makes, for one that killed its worker
    config: object = None  # what both are handed, in every worker
    warm: Callable | None = None  # warm(config): what a worker does before its first unit (a spare is warm when needed)
    slower: Callable[[str], float] = _one  # a case id -> how many timeouts it may take (a compile takes longer than a call)
    kin: Callable[[str], str | None] | None = None  # a case id -> what it shares with the cases likely to hang with it
    share: Callable[[object], bool] | None = None  # whether a unit's rest may be split among idle workers


@dataclass(frozen=True, kw_only=True)
class Settings:
    """How a pool runs its work: how many workers, how long a case may take, and (the local pool's) how they start."""

    workers: int
    timeout: float  # seconds one case may take before it is a hang
    threads: int = 1  # intra-op threads in each worker
    log: str | None = None  # where workers' own output goes (device asserts, crash traces); None: inherited
    first: float = 1.0  # the share of its time a case may take before it is set aside, unless it is a replay (first_share)
    searched: float = 1.0  # the share of a case setting searched values (searched_share)
    after_hang: float = 1.0  # the share of a case setting values in a unit where such a case hung (after_hang_share)
    # the wall-clock second the run's sweep stops starting oracle and searched cases (run.deadline; 0: none): where set,
    # the units go out in stages, each searched part with its slice of the time (workers.parts)
    deadline: float = 0.0
    # the local pool's own (workers.pool):
    spares: int | None = None  # warm spares kept once a worker was replaced (None: default_spares)
    pins: tuple[dict, ...] = ()  # the environments that pin workers to GPUs, in turn
    start: str | None = None  # forkserver or spawn (None: workers.starts.default_start)
    preload: tuple[str, ...] = ()  # what the fork server imports first (workers.starts.begin)
    environ: dict[str, str] | None = None  # what every worker's environment adds
    remark: str = ""  # said by where()


@dataclass
class Callbacks:
    skip_for: Callable[[object], set]
    on_outcome: Callable[[object, object], None]
    on_failed: Callable[[object, str, str, str, object], None]  # unit, case_id, crash|hang, how, call
    on_collateral: Callable[[object, str, str], None]
    on_unit_done: Callable[[object, str, str], None]  # unit, "done"|"failed", detail
    # what a unit says about itself that is no case's outcome: "KIND DETAIL" (the search's budget: "search 24/180")
    on_note: Callable[[object, str], None] = lambda unit, note: None


@dataclass(kw_only=True)
class Slot:
    """One unit in flight and where its cases stand; a pool's subclass adds its worker."""

    unit: object = None
    skip: set = field(default_factory=set)
    in_flight: str | None = None  # case id begun and not finished
    since: float = 0.0
    limit: float = 0.0  # seconds the case in flight may take
    setup_failures: int = 0
    replaying: str | None = None  # case id being replayed alone after a failure
    replayed: str = "pass"  # the status of the replay's outcome, where it sent one
    set_aside: bool = False  # the replay is of a hang set aside: once settled, the slot takes the next unit
    describing: tuple | None = None  # (case_id, kind, how) waiting for its description
    call: object = None  # the description of the case replayed, sent by its worker before running it
    part: tuple[int, int] | None = None  # (index, count): this slot runs one part of its split unit
    extra: bool = False  # beyond the workers, for a hang's replay: ended once it is settled
