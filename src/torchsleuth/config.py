"""What a sweep was asked to do: the one record every stage and process reads."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol

from .cases.records import DEFAULT_DTYPES, LAYOUTS, VARIANTS
from .errors import UsageError

DEFAULT_SAMPLES = 3
DEFAULT_TIMEOUT = 60.0
# Where a sweep's units run: worker processes on this machine (workers.pool), or Ray tasks on a cluster (workers.ray_pool).
EXECUTORS = ("local", "ray")


def check_executor(executor: str, ray_address: str | None) -> None:
    """UsageError for an executor that is none of EXECUTORS, or a Ray address without the ray executor."""
    if executor not in EXECUTORS:
        raise UsageError(f"unknown executor {executor!r}; expected one of: {', '.join(EXECUTORS)}")
    if ray_address is not None and executor != "ray":
        raise UsageError(f"--ray-address {ray_address} needs --executor ray; the local pool (the default) runs on this machine only")


class RunConfig(Protocol):
    """What the store needs of any run's config (ops, optim, shard, watch): ``Store.start`` reads these.

    A frozen dataclass (the store keeps it as JSON, through ``codec``) that
    names its command and device, and whose ``key`` identifies what it runs:
    an unfinished run with the same key is resumed.
    """

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def command(self) -> str: ...

    @property
    def device(self) -> str: ...

    def key(self) -> str: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepConfig:
    command: str = "ops"
    device: str = "cpu"
    ops: tuple[str, ...] = ()  # catalog names, already resolved from --ops
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    layouts: tuple[str, ...] = LAYOUTS
    variants: tuple[str, ...] = VARIANTS
    samples: int = DEFAULT_SAMPLES  # samples per op and dtype (0: all)
    workers: int = 1
    timeout: float = DEFAULT_TIMEOUT  # seconds one case may take before it is a hang
    threads: int = 1  # intra-op threads in each worker
    # modules or .py files every worker imports first (custom kernels, backends)
    imports: tuple[str, ...] = ()
    # the oracle plug-ins (oracles/) run on top of the references and contracts, by name
    oracles: tuple[str, ...] = ()
    # shrink every finding and diagnose every group after the sweep (--no-shrink)
    shrink: bool = True
    # searches beyond OpInfo's samples (search: values, arguments, long, ...), by name
    search: tuple[str, ...] = ()
    # searched cases per op and dtype (0: every one planned), spread over those planned
    budget: int = 0
    # seconds of searched cases per op and dtype (0: no limit)
    budget_seconds: float = 0.0
    # sweep the dtypes an op does not declare too, where its kernel takes them (run.probe)
    probe_dtypes: bool = False
    # oracles whose cases join the searched cases, within the budget (a whole-catalog run's sample of them), by name
    sampled: tuple[str, ...] = ()
    # where the units run (EXECUTORS), and the Ray cluster to join (HOST:PORT or "auto"; None: a local Ray instance)
    executor: str = "local"
    ray_address: str | None = None
    # the GPUs (indices of ``device``'s kind) the local pool's workers are spread over, each worker pinned to one in
    # turn and seeing only it; empty: every worker on ``device``
    gpus: tuple[int, ...] = ()
    # on a device where a bad index asserts: the cases per op and dtype whose values the CPU refuses that are sent to
    # the device after the sweep, each alone (shrink.refusals; 0: none)
    refusals: int = 0
    # the seconds the run aims to end within (0: none); its sweep's oracle and searched cases stop at ``deadline``, the
    # wall-clock second its share of them ends, set when the sweep begins (run.deadline)
    time_target: float = 0.0
    deadline: float = 0.0

    def __post_init__(self) -> None:
        check_executor(self.executor, self.ray_address)

    def key(self) -> str:
        """Identifies what is swept (not how fast, nor where): a rerun with the same key resumes, on either executor."""
        fields = asdict(self)
        for how in ("workers", "timeout", "threads", "shrink", "executor", "ray_address", "gpus", "refusals", "time_target", "deadline"):
            fields.pop(how)
        for added in ("search", "budget", "budget_seconds", "probe_dtypes", "sampled"):  # absent at their defaults: older runs keep their keys
            if fields[added] == _DEFAULTS[added]:
                fields.pop(added)
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


_DEFAULTS = {"search": (), "budget": 0, "budget_seconds": 0.0, "probe_dtypes": False, "sampled": ()}
