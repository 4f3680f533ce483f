"""``watch`` on a sharded program: N ranks started as torchrun starts them, and what each found gathered into one run.

Design note. A sharded program is N processes. ``watch --nproc N train.py``
starts them itself, each a ``python -m torchsleuth watch ... train.py`` with
the environment a torchrun-launched script expects (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``), so the user's unchanged script that calls
``init_process_group`` or ``init_device_mesh`` joins a group of N (gloo on
the CPU; NCCL with one GPU a rank, ``LOCAL_RANK``, on CUDA: the script's
own choice, the same launch). As torchrun's agent does, this process hosts
the TCPStore at ``MASTER_PORT`` and tells the ranks so
(``TORCHELASTIC_USE_AGENT_STORE``): their process group is a client of it.

Each rank watches its own part of the program (watch.session: invariants on
its local shards, the shadow replay of its plain and DTensor calls) and, at
the end, posts what it found to the store under a key of its own (``post``):
its findings, its counts and notes, and its script's exit status. Nothing
is sent through the program's process group, which the script may have
destroyed by then. The gatherer reads every rank's post: under ``--nproc``
this process, once the ranks have exited; under ``torchrun --nproc-per-node
N -m torchsleuth watch train.py`` (the same environment, made by torchrun)
rank 0, which waits for the others' posts (``collect``). Either way the
gatherer alone stores one run (``record``): a finding several ranks made
(the same id) is kept once, naming the ranks that made it; a rank that died
or never posted is a note. The run's time counts from the launch (under
``--nproc``, the ranks' whole run and the one-rank run of ``--parity``;
under torchrun, rank 0's watch); its note counts the DTensor calls judged on
each rank (the same calls everywhere) and the plain calls over all ranks,
and what was checked in all (``checked``: steps and calls over all ranks)
decides the exit status "nothing was checked". The device in the run's
header is the one the ranks computed on (``device``: CUDA once used).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

from .. import codec
from ..cases.records import Case
from ..errors import UsageError
from ..judge.records import Finding, Outcome
from . import parity

# Set in the environment of the ranks ``--nproc`` starts: their parent gathers what they post.
PARENT = "TORCHSLEUTH_WATCH_PARENT"
KEY = "torchsleuth/watch/rank/{}"
POST_SECONDS = 600.0  # how long a gatherer waits for a rank's post once its own part is done


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Rank:
    """Where this process stands in a launch."""

    rank: int
    world: int
    local: int
    parent: bool  # a rank ``--nproc`` started (its parent gathers), not one of torchrun's


def this_rank() -> Rank | None:
    """This process's place in a launch, from the environment torchrun (or ``--nproc``) makes; None when not launched."""
    if "WORLD_SIZE" not in os.environ:
        return None
    try:
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ["WORLD_SIZE"])
    except ValueError:
        raise UsageError("WORLD_SIZE and RANK must be whole numbers, as torchrun sets them") from None
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_ADDR" not in os.environ:
        raise UsageError("watch on ranks gathers them through the launcher's store: start it with `torchsleuth watch --nproc N "
                         "train.py` or `torchrun --nproc-per-node N -m torchsleuth watch train.py`")
    return Rank(rank=rank, world=world, local=int(os.environ.get("LOCAL_RANK", rank)), parent=os.environ.get(PARENT) == "1")


def _client(timeout: float = POST_SECONDS):
    import torch.distributed as dist

    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=timeout))


def post(rank: int, payload: dict) -> None:
    """This rank's findings, counts and status, posted to the launcher's store for the gatherer."""
    _client().set(KEY.format(rank), json.dumps(payload))


def payload(session, *, rank: int, status: int, extra: dict | None = None) -> dict:
    """What a rank posts: its findings (as records), its counts and notes, its script's exit status."""
    import torch

    shadow = session.shadow
    return {
        # the device the program computed on: CUDA is initialised in a process only once it is used
        "device": "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu",
        "rank": rank, "status": status, "steps": session.context.step, "findings": [codec.encode(f) for f in session.findings],
        "judged": shadow.judged if shadow else 0, "dtensor_judged": getattr(shadow, "dtensor_judged", 0),
        "errors": dict(shadow.errors) if shadow else {}, "sampled": session.checks.sampled(),
        "parity": session.parity.payload() if session.parity is not None and rank == 0 else None, **(extra or {}),
    }


def collect(world: int, *, skip: int | None = None, timeout: float = POST_SECONDS) -> list[dict | None]:
    """Every rank's post (None for a rank that posted nothing within ``timeout``); ``skip``: a rank whose post is not
    waited for (the gatherer's own, handed in by it)."""
    client = _client(timeout)
    found: list[dict | None] = []
    deadline = time.monotonic() + timeout
    for rank in range(world):
        if rank == skip:
            found.append(None)
            continue
        key = KEY.format(rank)
        while not client.check([key]) and time.monotonic() < deadline:
            time.sleep(0.05)
        found.append(json.loads(client.get(key)) if client.check([key]) else None)
    return found


def spawn(nproc: int, argv: list[str], *, timeout: float | None = None) -> tuple[list[dict | None], list[int]]:
    """``python -m torchsleuth watch ARGV`` on ``nproc`` ranks (see the design note): each rank's post, and exit status."""
    import torch.distributed as dist

    port = _free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=POST_SECONDS))
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(nproc),
           "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
           "TORCHELASTIC_RESTART_COUNT": "0", PARENT: "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    children = [subprocess.Popen([sys.executable, "-m", "torchsleuth", "watch", *argv],
                                 env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(nproc)]
    codes = []
    try:
        for child in children:
            codes.append(child.wait(timeout=timeout))
    except subprocess.TimeoutExpired:
        for child in children:
            if child.poll() is None:
                child.kill()
        codes = [child.wait() for child in children]
    posts = []
    for rank in range(nproc):
        key = KEY.format(rank)
        posts.append(json.loads(store.get(key)) if store.check([key]) else None)
    return posts, codes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def merged(posts: list[dict | None], world: int) -> list[Finding]:
    """The findings of every rank, each id once, naming the ranks that made it (in the order rank 0, 1, ... found them)."""
    by_id: dict[str, list[tuple[int, Finding]]] = collections.OrderedDict()
    for rank, posted in enumerate(posts):
        for data in (posted or {}).get("findings", ()):
            finding = codec.decode(Finding, data)
            by_id.setdefault(finding.id, []).append((rank, finding))
    return [_one(found, world) for found in by_id.values()]


def _one(found: list[tuple[int, Finding]], world: int) -> Finding:
    ranks = sorted({r for r, _ in found})
    first = found[0][1]
    if world < 2:
        return first
    on = "every rank" if len(ranks) == world else f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} of {world}"
    data = first.data
    if data and first.kind == "sharding_mismatch":
        loaded = json.loads(data)
        loaded["ranks"] = ranks
        data = json.dumps(loaded)
    words = f" Wrong on {on}." if first.kind == "sharding_mismatch" else f" (on {on})"
    return dataclasses.replace(first, summary=first.summary + words, data=data)


def device(posts: list[dict | None]) -> str:
    """The device the ranks computed on, as the run's header names it: cuda if any rank used it."""
    return "cuda" if any((p or {}).get("device") == "cuda" for p in posts) else "cpu"


def checked(posts: list[dict | None]) -> int:
    """What the ranks checked, for the exit status: the optimizer steps and the calls judged, over all ranks (0: nothing)."""
    return sum(p["steps"] + p["judged"] + p["dtensor_judged"] for p in posts if p is not None)


def record_parity(frame, alone: dict | None, first: dict | None, world: int, program: str, rerun: list[str] = ()) -> None:
    """The parity of the run on one rank (``alone``, its only rank's post) and rank 0's of the run on ``world``;
    ``rerun``: the watch arguments that compare them again (its repro script runs them)."""
    if not alone or not first or not alone.get("parity") or not first.get("parity"):
        frame.note("parity", "not compared: a run posted no record of its steps")
        return
    found = parity.compare(alone["parity"], first["parity"], world, program, rerun=rerun)
    steps = min(len(alone["parity"]["grads"]), len(first["parity"]["grads"]))
    if found is not None:
        frame.record(Outcome(case=Case.parse(found.case_id), status="finding", findings=(found,)))
    frame.note("parity", f"the first {steps} steps' losses and full gradients compared with the run on one rank"
                         + ("" if found is None else f": they part at step {found.case_id.split('|')[4][1:]}")
                         + (f"; that run had {len(alone['findings'])} finding(s) of its own" if alone.get("findings") else ""))


def record(frame, posts: list[dict | None], codes: list[int | None], world: int) -> None:
    """The ranks' merged findings and notes, into the gatherer's run."""
    for finding in merged(posts, world):
        frame.record(Outcome(case=Case.parse(finding.case_id), status="finding", findings=(finding,)))
    got = [p for p in posts if p is not None]
    steps = max((p["steps"] for p in got), default=0)
    judged = sum(p["judged"] for p in got)
    sharded = sorted({p["dtensor_judged"] for p in got}) or [0]
    each = f"{sharded[0]}" if len(sharded) == 1 else f"{sharded[0]} to {sharded[-1]}"
    frame.note("watch", f"{world} ranks; {steps} optimizer step{'s' if steps != 1 else ''}; {each} DTensor calls judged on each "
                        f"rank against the plain op on their gathered tensors (the same calls on every rank, each gathered "
                        f"alike); {judged} plain op calls judged on the ranks' local tensors, over all ranks (each distinct "
                        f"call once)" + ("" if len(got) == world else f"; {world - len(got)} rank(s) posted nothing"))
    for rank, posted in enumerate(posts):
        code = codes[rank] if rank < len(codes) else None
        if posted is None:
            frame.note("ranks", f"rank {rank} posted nothing" + (f" (it exited with status {code})" if code is not None else ""))
        elif posted.get("status"):
            frame.note("ranks", f"rank {rank}: the script exited with status {posted['status']}")
    sampled = next((p["sampled"] for p in got if p.get("sampled")), "")
    if sampled:
        frame.note("watch", sampled)
    errors = collections.Counter()
    for p in got:
        errors.update(p.get("errors", {}))
    for reason, count in errors.most_common():
        frame.note("not judged", f"{count} call(s): {reason}")
