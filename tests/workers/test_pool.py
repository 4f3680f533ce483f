"""The local pool's workers: warm spares for replacements, hangs set aside until no unit is left, workers pinned to GPUs.

The work here is no sweep: a unit is a name and a list of case names; a case named ``pause`` sleeps, ``die`` kills its
worker (its replay alone too, so the pool reports it), ``slow`` takes 1.2 s, ``hang`` never returns, and ``hang_after`` hangs only in a
process that has run a case before it (collateral: alone, it passes), ``late`` passes after 0.3 s, ``tainted`` ends its
worker unless it runs alone, where its outcome is an error, ``gone`` passes and then says the device is lost,
``die_slowly`` closes its worker's pipe and dies of SIGABRT 3 s later; ``hang_told`` and ``die_told`` are ``hang``
and ``die`` whose replay alone sends its description before it runs; ``hang_gone`` and ``die_gone`` are ``hang`` and
``die`` whose replay alone passes and then says the device is lost. Every process writes what it did to a log
(``O_APPEND``, one line a write), so the test reads which process ran what, and when.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import types

import pytest

import torchsleuth.sweep  # noqa: F401  (sys.modules["torchsleuth.sweep"]: the attribute is the function)
from torchsleuth import devices
from torchsleuth.errors import UsageError
from torchsleuth.workers.records import Callbacks, Settings, Work
from torchsleuth.workers.parts import Leaving, Part, Timed, in_part, plan, sliced, upfront
from torchsleuth.workers.shares import after_hang_share, first_share, searched_share
from torchsleuth.workers.pool import DeviceLost, DeviceUnavailable, Pool


def _log(config, line: str) -> None:
    with open(config, "a") as f:
        f.write(f"{time.monotonic():.6f} {os.getpid()} {line}\n")


def _warm(config) -> None:
    time.sleep(0.5)  # a start that takes a while, as importing torch and the catalog does
    _log(config, "warm")


def _work(unit, config, skip, only):
    _log(config, f"unit {unit[0]}")
    _log(config, f"pin {os.environ.get('CUDA_VISIBLE_DEVICES')} {unit[0]}")
    ran = 0
    for case in unit[1]:
        if case in skip or (only is not None and case != only):
            continue
        yield "begin", case
        _log(config, f"case {case}")
        if case.endswith("_gone"):  # hang or die, but alone pass and then say the device is lost
            if case == only:
                yield "outcome", case
                raise DeviceLost("the device no longer works")
            case = case[: -len("_gone")]
        if case.endswith("_told"):  # hang or die; a replay alone sends its description first (as engine._judged does)
            if case == only:
                yield "call", f"told by {os.getpid()}"
            case = case[: -len("_told")]
        if case == "hang" or (case == "hang_after" and ran):
            time.sleep(600)
        ran += 1
        if case == "die":
            _log(config, "die")
            os._exit(7)
        if case == "tainted":  # ends its worker unless run alone, where its outcome is not a pass (as engine.TAINTED does)
            if only is None:
                os._exit(3)
            yield "outcome", types.SimpleNamespace(status="error", case=case)
            continue
        if case == "die_slowly":  # its pipe closes, and the process takes a while to end (a GPU context torn down)
            for fd in os.listdir("/proc/self/fd"):  # the pipe to the parent is a socket pair
                try:
                    if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                        os.close(int(fd))
                except OSError:  # the directory's own descriptor, gone by now
                    pass
            time.sleep(3.0)
            _log(config, "exits")
            os.kill(os.getpid(), signal.SIGABRT)
        if case == "segv":  # a kernel's crash: the worker's stacks are written (workers.faults)
            os.kill(os.getpid(), signal.SIGSEGV)
        if case == "pause":
            time.sleep(1.5)  # longer than a spare's warm-up
        if case == "slow":
            time.sleep(1.2)  # more than a quarter of a 2 s timeout, less than the whole
        if case == "gone":  # the device no longer works in this process (as engine.DeviceLost after a CUDA fault)
            yield "outcome", case
            raise DeviceLost("the device no longer works")
        if case == "late":
            time.sleep(0.3)  # a worker ended as the case begins never gets this far
            _log(config, "ran late")
        yield "outcome", case


def _describe(unit, config, case_id):
    _log(config, f"describe {case_id}")
    return f"the call of {case_id}"


def _run(pool: Pool, units: list, close: bool = True) -> dict:
    seen = {"outcomes": [], "failed": [], "done": [], "collateral": [], "order": [], "details": {}}

    def saw(kind, item):
        seen[kind].append(item)
        seen["order"].append((kind, item))

    pool.run(units, Callbacks(
        skip_for=lambda unit: set(),
        on_outcome=lambda unit, outcome: saw("outcomes", outcome),
        on_failed=lambda unit, case_id, kind, how, call: saw("failed", (case_id, kind, call)),
        on_collateral=lambda unit, case_id, how: saw("collateral", case_id),
        on_unit_done=lambda unit, state, detail: (saw("done", (unit[0], state)), seen["details"].__setitem__(unit[0], detail)),
    ), close=close)
    return seen


def _lines(path) -> list[tuple[float, int, str]]:
    return [(float(t), int(pid), what) for t, pid, what in (line.split(" ", 2) for line in path.read_text().splitlines())]


@pytest.mark.slow
def test_a_replacement_takes_a_spare_that_was_warm_before_it_was_needed(tmp_path):
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), warm=_warm), Settings(workers=1, timeout=30, spares=2))
    # the first unit's crash asks for two workers (the replay alone, then the rest of the unit); the second unit
    # crashes after a pause, by when the spares started at the first replacement are warm
    seen = _run(pool, [("first", ["a", "die", "b"]), ("second", ["c", "pause", "die", "d"])])
    assert [c for c, kind, call in seen["failed"]] == ["die", "die"] and all(kind == "crash" for _, kind, _ in seen["failed"])
    assert seen["outcomes"] == ["a", "b", "c", "pause", "d"]
    assert seen["done"] == [("first", "done"), ("second", "done")]

    lines = _lines(log)
    warmed = {pid: t for t, pid, what in lines if what == "warm"}
    deaths = [t for t, pid, what in lines if what == "die"]
    assert len(deaths) == 4  # each crash and its replay alone
    # the worker that took the second unit's replay was warm before the crash that asked for it
    replay_of_second = next(pid for t, pid, what in lines if what == "unit second" and t > deaths[2])
    assert warmed[replay_of_second] < deaths[2], lines
    # every process the pool started warmed up first, and the spares were kept: 1 worker + 4 replacements + 2 spares
    assert pool.started == 1 + 4 + 2 and set(warmed) >= {pid for _, pid, what in lines if what.startswith("unit")}


def test_a_pool_whose_workers_never_die_starts_no_spare(tmp_path):
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), warm=_warm), Settings(workers=2, timeout=30))
    seen = _run(pool, [("one", ["a", "b"]), ("two", ["c"]), ("three", ["d"])])
    assert sorted(seen["outcomes"]) == ["a", "b", "c", "d"] and not seen["failed"]
    assert pool.started == 2
    assert len({pid for _, pid, what in _lines(log) if what == "warm"}) == 2


@pytest.mark.slow
def test_a_hang_is_set_aside_its_unit_goes_on_and_it_is_replayed_when_no_unit_is_left(tmp_path):
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=1, timeout=1.0, spares=1))
    seen = _run(pool, [("first", ["a", "hang", "b"]), ("second", ["c"])])
    assert [(c, kind) for c, kind, _ in seen["failed"]] == [("hang", "hang")]  # described too, unless that outran 1 s
    assert seen["outcomes"] == ["a", "b", "c"]
    # the first unit went on past its hang (b, then the second unit) before the replay; it is done only once the
    # replay has settled the hang, after the second unit
    assert seen["order"] == [("outcomes", "a"), ("outcomes", "b"), ("outcomes", "c"), ("done", ("second", "done")),
                             ("failed", seen["failed"][0]), ("done", ("first", "done"))]
    cases = [(pid, what) for _, pid, what in _lines(log) if what.startswith("case ")]
    hang_runs = [pid for pid, what in cases if what == "case hang"]
    assert len(hang_runs) == 2 and hang_runs[0] != hang_runs[1]  # the replay ran in another process ...
    assert [what for pid, what in cases if pid == hang_runs[1]] == ["case hang"]  # ... alone


@pytest.mark.slow
def test_a_hang_set_aside_that_passes_alone_is_collateral_and_its_outcome_is_kept(tmp_path):
    pool = Pool(Work(run=_work, describe=_describe, config=str(tmp_path / "log")), Settings(workers=2, timeout=1.0, spares=1))
    seen = _run(pool, [("first", ["a", "hang_after", "b"]), ("second", ["c", "d"])])
    assert not seen["failed"] and seen["collateral"] == ["hang_after"]
    assert sorted(seen["outcomes"]) == ["a", "b", "c", "d", "hang_after"]
    assert sorted(seen["done"]) == [("first", "done"), ("second", "done")]
    assert seen["order"].index(("done", ("first", "done"))) > seen["order"].index(("collateral", "hang_after"))


@pytest.mark.slow
@pytest.mark.parametrize("first", [0.25, 1.0])
def test_on_a_shared_gpu_a_case_is_set_aside_after_a_share_of_its_time_and_its_replay_gets_all_of_it(tmp_path, first):
    # first=0.25 (workers sharing a GPU): "slow" outlives 0.5 s of its 2 s, is set aside, and passes alone with the
    # whole 2 s (its outcome kept); a real hang still fails. first=1.0 (the CPU): "slow" passes where it is.
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=1, timeout=2.0, spares=1, first=first))
    seen = _run(pool, [("first", ["a", "slow", "b", "hang"])])
    assert [(c, kind) for c, kind, _ in seen["failed"]] == [("hang", "hang")]
    assert sorted(seen["outcomes"]) == ["a", "b", "slow"] and seen["done"] == [("first", "done")]
    slow_runs = [pid for _, pid, what in _lines(log) if what == "case slow"]
    if first < 1.0:
        assert seen["collateral"] == ["slow"] and seen["outcomes"] == ["a", "b", "slow"]  # b went on before the replay
        assert len(slow_runs) == 2 and slow_runs[0] != slow_runs[1]
    else:
        assert seen["collateral"] == [] and seen["outcomes"] == ["a", "slow", "b"] and len(slow_runs) == 1


@pytest.mark.slow
@pytest.mark.parametrize("first", [0.25, 1.0])
def test_on_a_shared_gpu_a_hang_set_aside_is_replayed_beside_the_last_unit_in_a_worker_beyond_the_pool(tmp_path, first):
    # first=0.25 (workers sharing a GPU): "hang" is set aside after 0.5 s; as the last unit ("second", 3 s of pauses) is
    # handed out its replay starts in an extra worker, the run's tail; first=1.0 (the CPU): the replay waits for the
    # one worker to be through with "second" (a hang holds a core)
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=1, timeout=2.0, spares=1, first=first))
    seen = _run(pool, [("first", ["a", "hang"]), ("second", ["pause", "pause", "b"])], close=False)
    assert [(c, kind) for c, kind, _ in seen["failed"]] == [("hang", "hang")]
    assert sorted(seen["outcomes"]) == ["a", "b", "pause", "pause"] and sorted(seen["done"]) == [("first", "done"), ("second", "done")]
    lines = _lines(log)
    replay = [(t, pid) for t, pid, what in lines if what == "case hang"][1]  # the case, then its replay alone
    last = next((t, pid) for t, pid, what in lines if what == "case b")
    if first < 1.0:
        assert replay[0] < last[0] and replay[1] != last[1]  # beside the last unit, in another worker
    else:
        assert replay[0] > last[0]
    assert len(pool.slots) == 1  # no extra slot is left once its replay is settled
    pool.close()


@pytest.mark.slow
def test_on_a_shared_gpu_the_replay_of_a_hang_set_aside_begins_in_a_worker_started_for_it_when_it_was_set_aside(tmp_path):
    # "hang" is set aside after its share (0.5 s); a worker is started for its replay then. The unit goes on, pauses,
    # then crashes (its replay alone crashes too), taking the spares; as the last unit ("second") is handed out the
    # replay begins in the worker kept for it, warm since before the crash, which ran nothing else. Without it the
    # replay took a spare started after the crash (a whole-catalog run: the crashing units took every spare).
    # Once the replay is described its extra worker is ended: the pool reads it no further (it read the closed pipe,
    # took it for a worker's death and ran the unit again in a worker it no longer held, left running past close).
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), warm=_warm, slower=lambda case_id: 0.25 if case_id == "hang" else 1.0),
                Settings(workers=1, timeout=8.0, spares=1, first=0.25))  # the hang's share 0.5 s, its replay's 2 s
    started, start = [], pool._start
    pool._start = lambda *args, **kwargs: (slot := start(*args, **kwargs), started.append(slot.process))[0]
    seen = _run(pool, [("first", ["a", "hang", "pause", "die", "b"]), ("second", ["c"])])
    assert not [process.pid for process in started if process.is_alive()]  # every worker ended at close
    assert sorted((c, kind) for c, kind, _ in seen["failed"]) == [("die", "crash"), ("hang", "hang")]
    assert sorted(seen["outcomes"]) == ["a", "b", "c", "pause"]
    lines = _lines(log)
    warmed = {pid: t for t, pid, what in lines if what == "warm"}
    first_die = min(t for t, pid, what in lines if what == "die")
    replay = [pid for t, pid, what in lines if what == "case hang"][1]
    assert warmed[replay] < first_die, lines
    assert [what for _, pid, what in lines if pid == replay and what.startswith(("case", "unit"))] == ["unit first", "case hang"]
    assert not pool.reserved


def test_a_worker_that_says_its_device_is_lost_is_replaced_without_waiting_for_its_exit(tmp_path, monkeypatch):
    # "gone" ends its worker (the device lost: the worker exits by itself); beside a GPU that exit tears down a faulted
    # context for seconds, which the parent waited for. It is killed and replaced at once, reaped as it exits or at close.
    log = tmp_path / "log"
    joined = []
    join = multiprocessing.process.BaseProcess.join
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "join", lambda self, timeout=None: (joined.append(self.pid), join(self, timeout))[1])
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=1, timeout=30, spares=0))
    seen = _run(pool, [("first", ["a", "gone", "b"])], close=False)
    assert seen["outcomes"] == ["a", "gone", "b"] and seen["done"] == [("first", "done")] and seen["failed"] == []
    gone = next(pid for _, pid, what in _lines(log) if what == "case gone")
    b = next(pid for _, pid, what in _lines(log) if what == "case b")
    assert gone != b and gone not in joined  # the unit went on in a fresh worker, the lost one not waited for
    pool.close()
    assert not os.path.exists(f"/proc/{gone}")  # reaped (no zombie left) by close at the latest


@pytest.mark.slow
def test_a_worker_whose_pipe_closed_is_not_waited_for_while_it_exits_and_its_death_is_still_told(tmp_path):
    # Beside a GPU a worker that dies takes seconds to exit (its device context torn down); the parent waited for that
    # exit, up to 5 s, with every other worker's next unit waiting on it. Now it serves the others meanwhile, and the
    # crash is reported, once the worker has exited, with what it died of.
    log = tmp_path / "log"
    failed = []
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=2, timeout=30, spares=0))
    pool.run([("first", ["die_slowly", "a"]), ("second", ["late"]), ("third", ["b"])], Callbacks(
        skip_for=lambda unit: set(), on_outcome=lambda *a: None, on_collateral=lambda *a: None, on_unit_done=lambda *a: None,
        on_failed=lambda unit, case_id, kind, how, call: failed.append((case_id, kind, how, call))))
    lines = _lines(log)
    first_exit = next(t for t, _, what in lines if what == "exits")
    third = next(t for t, _, what in lines if what == "unit third")
    assert third < first_exit  # the next unit went out while the dying worker was still exiting
    assert [(case, kind, call) for case, kind, _, call in failed] == [("die_slowly", "crash", "the call of die_slowly")]
    assert "SIGABRT" in failed[0][2]  # what it died of, known once it exited
    assert [what for _, _, what in lines].count("case a") == 1  # its unit went on after it


@pytest.mark.slow
@pytest.mark.parametrize("first", [0.25, 1.0])
def test_a_replay_that_sent_its_description_is_reported_with_it_and_no_worker_is_asked_to_describe_it(tmp_path, first):
    # The replay's worker describes its case before running it; when it hangs (set aside, replayed at the end: on a
    # shared GPU in an extra slot, which ends there without a fresh worker) or dies, that description is reported and
    # no other worker is asked for one (at the end of a GPU run that wait was 2-7 s, a fresh context each).
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=1, timeout=2.0, spares=0, first=first))
    seen = _run(pool, [("first", ["a", "hang_told", "die_told", "b"]), ("second", ["c"])], close=False)
    lines = _lines(log)
    replays = {case: pid for _, pid, what in lines for case in ("hang", "die") if what == f"case {case}_told"}  # the last
    assert sorted(seen["failed"]) == sorted([("die_told", "crash", f"told by {replays['die']}"), ("hang_told", "hang", f"told by {replays['hang']}")])
    assert not [what for _, _, what in lines if what.startswith("describe")]
    assert sorted(seen["outcomes"]) == ["a", "b", "c"] and sorted(seen["done"]) == [("first", "done"), ("second", "done")]
    if first < 1.0:  # the extra slot's worker was ended with its replay, and no worker was started after it
        hang_replay = max(t for t, _, what in lines if what == "case hang_told")
        assert len(pool.slots) == 1 and not [t for t, _, what in lines if what == "unit first" and t > hang_replay]
    pool.close()


@pytest.mark.slow
@pytest.mark.parametrize("first", [0.25, 1.0])
def test_a_hang_whose_replay_alone_loses_the_device_is_settled_and_its_unit_is_not_run_again(tmp_path, first):
    # A case set aside as a hang (on a GPU, often a kernel slowed past its share) is replayed alone at the end; its
    # device was lost there after its outcome. That replay ran to its end: it is collateral. The slot went on with the
    # unit instead, with none of its cases to skip: whole-catalog runs on an H200 ran 1-3 such units again at the end.
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=1, timeout=2.0 if first < 1.0 else 1.0, spares=0, first=first))
    seen = _run(pool, [("first", ["a", "hang_gone", "b"]), ("second", ["c"])])
    ran = [what for _, _, what in _lines(log) if what.startswith("case ")]
    assert sorted(ran) == ["case a", "case b", "case c", "case hang_gone", "case hang_gone"]  # each once, and the replay
    assert sorted(seen["outcomes"]) == ["a", "b", "c", "hang_gone"] and seen["collateral"] == ["hang_gone"]
    assert sorted(seen["done"]) == [("first", "done"), ("second", "done")] and seen["failed"] == []


def test_a_crash_whose_replay_alone_loses_the_device_is_settled_before_its_unit_goes_on(tmp_path):
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=1, timeout=30, spares=0))
    seen = _run(pool, [("first", ["a", "die_gone", "b"])])
    order = seen["order"]
    assert order.index(("collateral", "die_gone")) < order.index(("outcomes", "b")) < order.index(("done", ("first", "done")))
    assert [what for _, _, what in _lines(log) if what.startswith("case ")] == ["case a", "case die_gone", "case die_gone", "case b"]
    assert [what for _, _, what in _lines(log)].count("unit first") == 3  # the unit, the replay, the rest: once each


def test_a_replay_that_dies_before_sending_its_description_is_described_by_another_worker(tmp_path):
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=1, timeout=30, spares=0))
    seen = _run(pool, [("first", ["a", "die", "b"])])
    assert seen["failed"] == [("die", "crash", "the call of die")]
    assert [what for _, _, what in _lines(log) if what.startswith("describe")] == ["describe die"]


def _unavailable(config) -> None:
    raise DeviceUnavailable("this worker cannot run a kernel on cuda")


def test_a_worker_whose_device_cannot_run_a_kernel_from_its_start_judges_nothing_and_its_units_fail_saying_so(tmp_path):
    # The warm-up finds the device unusable (a driver refusing new contexts): no case may be judged there (each would be
    # recorded as raised), so the worker exits at once; its unit is retried once in a fresh worker, then failed.
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), warm=_unavailable), Settings(workers=1, timeout=30, spares=0))
    seen = _run(pool, [("first", ["a", "b"]), ("second", ["c"])])
    assert seen["outcomes"] == [] and not log.exists()  # no worker began a unit
    assert [unit for unit, _ in seen["done"]] == ["first", "second"] and all(state == "failed" for _, state in seen["done"])
    assert "could not run a kernel on its device from its start" in seen["details"]["first"]


def test_the_share_is_all_of_the_time_on_the_cpu_and_a_fifth_on_an_accelerator_a_tenth_searched_a_fiftieth_after_a_hang():
    assert first_share("cpu") == 1.0 and first_share("cuda") == first_share("cuda:1") == first_share("mps") == 0.2
    assert searched_share("cpu") == 1.0 and searched_share("cuda") == searched_share("mps") == 0.1
    assert after_hang_share("cpu") == 1.0 and after_hang_share("cuda") == after_hang_share("mps") == 0.02


@pytest.mark.slow
@pytest.mark.parametrize("after_hang, searched", [(0.25, True), (0.25, False), (1.0, True)])
def test_once_a_case_setting_values_hung_the_units_other_cases_setting_values_get_the_smaller_share(tmp_path, after_hang, searched):
    # "hang" and "slow" set values (each its own kin; "slow" none where not searched). after_hang=0.25: once "hang" is
    # set aside, "slow" (1.2 s) outlives 0.5 s of its 2 s, is set aside too, and passes alone with the whole 2 s after
    # "b" went on; where it ran before the hang it passed in place (tests above). A "slow" that sets no values
    # (OpInfo's own sample), or after_hang=1.0 (the CPU): in place.
    log = tmp_path / "log"
    kin = {"hang": "h", "slow": "s"} if searched else {"hang": "h"}
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), kin=kin.get), Settings(workers=1, timeout=2.0, spares=1, first=1.0, after_hang=after_hang))
    seen = _run(pool, [("first", ["a", "hang", "slow", "b"]), ("second", ["c", "d"])])
    assert [(c, kind) for c, kind, _ in seen["failed"]] == [("hang", "hang")]
    assert sorted(seen["done"]) == [("first", "done"), ("second", "done")]
    slow_runs = [pid for _, pid, what in _lines(log) if what == "case slow"]
    if after_hang < 1.0 and searched:
        assert seen["collateral"] == ["slow"] and seen["outcomes"] == ["a", "b", "c", "d", "slow"]
        assert len(slow_runs) == 2 and slow_runs[0] != slow_runs[1]  # set aside, then its replay alone
    else:
        assert seen["collateral"] == [] and seen["outcomes"] == ["a", "slow", "b", "c", "d"] and len(slow_runs) == 1


@pytest.mark.slow
@pytest.mark.parametrize("searched", [True, False])
def test_a_case_setting_searched_values_gets_the_smaller_searched_share_and_a_samples_own_case_the_first(tmp_path, searched):
    # searched=0.25 of a 2 s timeout, the first share whole: "slow" (1.2 s) setting searched values (a kin) outlives its
    # 0.5 s, is set aside and passes in its replay alone with the whole 2 s; the same case setting none (OpInfo's own
    # sample) passes in place. No hang anywhere: the smaller share is the searched values' own.
    log = tmp_path / "log"
    kin = {"slow": "s"} if searched else {}
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), kin=kin.get), Settings(workers=1, timeout=2.0, spares=1, first=1.0, searched=0.25))
    seen = _run(pool, [("first", ["a", "slow", "b"])])
    assert seen["failed"] == [] and seen["done"] == [("first", "done")]
    slow_runs = [pid for _, pid, what in _lines(log) if what == "case slow"]
    if searched:
        assert seen["collateral"] == ["slow"] and seen["outcomes"] == ["a", "b", "slow"]
        assert len(slow_runs) == 2 and slow_runs[0] != slow_runs[1]  # set aside, then its replay alone
    else:
        assert seen["collateral"] == [] and seen["outcomes"] == ["a", "slow", "b"] and len(slow_runs) == 1


@pytest.mark.slow
def test_workers_are_spread_over_the_gpus_and_a_replacement_keeps_its_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=2, timeout=30, spares=1, pins=(devices.pinned(0), devices.pinned(1))))
    units = [("one", ["a"]), ("two", ["b", "pause"]), ("three", ["c", "die", "d"]), ("four", ["e"])]
    seen = _run(pool, units)
    assert sorted(seen["outcomes"]) == ["a", "b", "c", "d", "e", "pause"] and [c for c, _, _ in seen["failed"]] == ["die"]
    pins = [what.split() for _, _, what in _lines(log) if what.startswith("pin ")]
    by_pid = {}
    for (_, pid, what) in _lines(log):
        if what.startswith("pin "):
            by_pid.setdefault(pid, set()).add(what.split()[1])
    assert all(len(gpus) == 1 for gpus in by_pid.values())  # a process keeps its GPU
    first = [gpu for _, gpu, unit in pins if unit in ("one", "two")]
    assert sorted(first) == ["0", "1"]  # the two workers, one on each GPU
    three = [gpu for _, gpu, unit in pins if unit == "three"]
    assert len(three) == 3 and len(set(three)) == 1  # the unit, its crash's replay and its rest: the same GPU each time
    assert "over GPUs 0, 1" in pool.where()
    assert os.environ.get("CUDA_VISIBLE_DEVICES") is None  # the parent's own environment is left as it was


def test_a_pin_is_an_index_among_the_gpus_this_process_sees(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert devices.pinned(1) == {"CUDA_VISIBLE_DEVICES": "6"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert devices.pinned(1) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert devices.every_gpu("cpu") == () and devices.every_gpu("cuda:1") == ()
    with pytest.raises(UsageError, match="comma-separated"):
        devices.spread("cpu")


def test_the_workers_stacks_go_beside_the_log_a_killed_runs_are_taken_over_and_all_are_removed_at_close(tmp_path):
    # A crash's place comes from the stacks its worker wrote (workers.faults) into a directory beside the pool's log; a run
    # killed before its pool closed left one there (a file of a worker long gone), which this pool takes over.
    log, stacks = tmp_path / "runs.workers.log", tmp_path / "runs.workers.stacks"
    stacks.mkdir()
    (stacks / "999999").write_text("")
    pool = Pool(Work(run=_work, describe=_describe, config=str(tmp_path / "trace")), Settings(workers=1, timeout=30, spares=0, log=str(log)))
    failed = []
    pool.run([("one", ["a", "segv", "b"])], Callbacks(
        skip_for=lambda unit: set(), on_outcome=lambda unit, outcome: None, on_collateral=lambda unit, case_id, how: None,
        on_failed=lambda unit, case_id, kind, how, call: failed.append((case_id, how)), on_unit_done=lambda unit, state, detail: None))
    [(case_id, how)] = failed
    assert case_id == "segv" and how.startswith("the worker died of SIGSEGV at ") and "test_pool.py:" in how  # its place
    assert pool.stacks is None and not stacks.exists()  # closed: removed, the leftover with it


@pytest.mark.slow
@pytest.mark.parametrize("kin", [True, False])
def test_a_case_setting_the_values_of_a_hang_set_aside_is_set_aside_unrun(tmp_path, kin):
    # "late" sets the same values as "hang" (its kin): once the hang is set aside, "late" is set aside as it begins,
    # its worker ended before it ran, and it passes in its replay alone at the end. Without kin it passes in place.
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), kin=(lambda case: "v" if case in ("hang", "late") else None) if kin else None),
                Settings(workers=1, timeout=1.0, spares=1))
    seen = _run(pool, [("first", ["a", "hang", "b", "late", "c"])])
    assert [(c, kind) for c, kind, _ in seen["failed"]] == [("hang", "hang")]
    assert sorted(seen["outcomes"]) == ["a", "b", "c", "late"] and seen["done"] == [("first", "done")]
    ran = [pid for _, pid, what in _lines(log) if what == "ran late"]
    assert len(ran) == 1  # it ran once: in place, or in its replay
    if kin:
        assert seen["collateral"] == ["late"] and seen["outcomes"] == ["a", "b", "c", "late"]
        assert [what for _, pid, what in _lines(log) if pid == ran[0] and what.startswith("case")] == ["case late"]  # alone
    else:
        assert seen["collateral"] == [] and seen["outcomes"] == ["a", "b", "late", "c"]


@pytest.mark.slow
def test_a_case_of_another_unit_setting_the_values_of_a_hang_set_aside_is_set_aside_unrun(tmp_path):
    # The same op in another dtype is another unit: its case with the hang's values ("late" in "second") is set aside
    # as it begins, once "first"'s hang is, and passes in its replay alone at the end; "second" is done after that.
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), kin=lambda case: "v" if case in ("hang", "late") else None),
                Settings(workers=1, timeout=1.0, spares=1))
    seen = _run(pool, [("first", ["a", "hang", "b"]), ("second", ["c", "late", "d"])])
    assert [(c, kind) for c, kind, _ in seen["failed"]] == [("hang", "hang")] and seen["collateral"] == ["late"]
    assert seen["outcomes"] == ["a", "b", "c", "d", "late"]
    assert [what for _, _, what in _lines(log) if what == "ran late"] == ["ran late"]  # once: alone, at the end
    assert sorted(seen["done"]) == [("first", "done"), ("second", "done")]


@pytest.mark.parametrize("share", [True, False])
def test_once_no_unit_is_left_a_unit_going_on_after_a_crash_is_split_among_the_idle_workers(tmp_path, share):
    # Three workers: "long" crashes at its second case; "x" and "y" are done long before its replay alone and its
    # description are, so two workers idle with nothing to hand out. The rest of "long" goes on in three parts, each
    # case run once, in all three workers; without ``share`` its one fresh worker runs all of it.
    log = tmp_path / "log"
    rest = [f"c{i}" for i in range(24)]
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), share=(lambda unit: True) if share else None), Settings(workers=3, timeout=30, spares=1))
    seen = _run(pool, [("long", ["a", "die", *rest]), ("x", ["x1"]), ("y", ["y1"])])
    assert [(c, kind) for c, kind, _ in seen["failed"]] == [("die", "crash")]
    assert sorted(seen["outcomes"]) == sorted(["a", *rest, "x1", "y1"])  # each case once: none twice, none lost
    assert sorted(seen["done"]) == [("long", "done"), ("x", "done"), ("y", "done")]  # "long" told done once, at the end
    # told done after every case of its own, whenever "x" and "y" end (under load they may end after it)
    before = seen["order"][:seen["order"].index(("done", ("long", "done")))]
    assert all(("outcomes", c) in before for c in ["a", *rest]) and any(k == "failed" and item[0] == "die" for k, item in before), seen["order"]
    ran_rest = {pid for _, pid, what in _lines(log) if what in {f"case {c}" for c in rest}}
    assert len(ran_rest) == (3 if share else 1)


@pytest.mark.parametrize("share", [True, False])
def test_a_run_with_fewer_units_than_workers_splits_them_up_front_and_runs_each_case_once(tmp_path, share):
    # One unit of 30 cases, three workers: split up front (workers.parts.upfront) into three parts, one a worker,
    # every case once and the unit told done once, after all of them; without ``share`` one worker runs it all.
    log = tmp_path / "log"
    cases = [f"c{i}" for i in range(30)]
    pool = Pool(Work(run=_work, describe=_describe, config=str(log), share=(lambda unit: True) if share else None),
                Settings(workers=3, timeout=30, spares=0))
    seen = _run(pool, [("one", cases)])
    assert sorted(seen["outcomes"]) == sorted(cases) and seen["done"] == [("one", "done")]
    assert seen["order"][-1] == ("done", ("one", "done"))
    ran = {pid for _, pid, what in _lines(log) if what.startswith("case ")}
    assert len(ran) == (3 if share else 1)


def test_units_are_split_up_front_only_where_they_are_fewer_than_the_workers():
    units = [("a",), ("b",)]
    assert upfront(units, 16, lambda unit: True) == {id(units[0]): 16, id(units[1]): 16}  # two a worker, at most one a worker each
    assert upfront(units * 3, 16, lambda unit: True) == {id(units[0]): 6, id(units[1]): 6}  # ceil(32 / 6)
    assert upfront(units, 2, lambda unit: True) == {} and upfront(units, 16, None) == {}
    assert upfront(units, 16, lambda unit: unit == ("a",)) == {id(units[0]): 16}
    assert upfront([("a",)], 1, lambda unit: True) == {}


def test_a_timed_part_that_left_cases_out_goes_out_again_while_there_is_time_and_its_notes_are_merged():
    timed, unit, part = Timed(), ("u",), Part(0, 2, "searched")
    timed.note(unit, part, "time 40/100")
    assert timed.again(unit, part, time.time() + 60)  # out again: 40 left, a minute to go
    timed.note(unit, part, "time 10/40")  # the second time it planned only what it had left
    assert not timed.again(unit, part, time.time() - 1)  # the deadline passed: it stays as it is
    timed.note(unit, Part(1, 2, "searched"), "time 5/90")
    assert not timed.again(unit, Part(0, 2, "slow"), time.time() + 60)  # it sent no note: it left nothing out
    assert timed.notes(unit) == ["time 10/100", "time 5/90"] and timed.notes(unit) == []
    timed.note(unit, part, "time 0/7")
    assert not timed.again(unit, part, time.time() + 60) and timed.notes(unit) == []


def _thirds(unit, config, skip, only):
    """A staged unit: its base stage runs the "b" cases; its searched stage at most 3 "s" cases a time out, saying how
    many it left out (as a part whose slice ran out does); its slow stage has none."""
    stage = getattr(skip, "stage", None)
    mine = [case for case in unit[1] if case not in skip and case.startswith({"base": "b", "searched": "s"}.get(stage, "-"))]
    for case in mine[:3]:
        yield "begin", case
        yield "outcome", case
    if len(mine) > 3:
        yield "note", f"time {len(mine) - 3}/{len(mine)}"


def test_with_a_time_target_a_part_that_left_cases_out_goes_out_again_until_none_is_left(tmp_path):
    seen, notes = [], []
    pool = Pool(Work(run=_thirds, describe=_describe, config=None, share=lambda unit: True),
                Settings(workers=1, timeout=30, spares=0, deadline=time.time() + 300))
    cases = ["b1", "b2", *(f"s{i}" for i in range(8))]
    pool.run([("one", cases)], Callbacks(skip_for=lambda unit: set(seen), on_outcome=lambda unit, outcome: seen.append(outcome),
                                         on_failed=None, on_collateral=None, on_unit_done=lambda unit, state, detail: notes.append("done"),
                                         on_note=lambda unit, note: notes.append(note)))
    assert sorted(seen) == sorted(cases)  # every case once: the searched part went out three times, 3 + 3 + 2
    assert notes == ["done"]  # nothing left out in the end, so no time note


def test_with_a_time_target_every_units_base_stage_goes_out_before_any_timed_stage():
    a, b, c = ("a",), ("b",), ("c",)
    items = plan([a, b, c], 2, lambda unit: unit != c, staged=True)
    assert [(unit, part.stage if part else None) for unit, part in items] == [
        (a, "base"), (b, "base"), (c, None), (a, "searched"), (a, "slow"), (b, "searched"), (b, "slow")]
    assert plan([a, b, c], 2, lambda unit: True, staged=False) == [(a, None), (b, None), (c, None)]
    split = plan([a], 2, lambda unit: True, staged=True)  # fewer units than workers: split up front too, in every stage
    assert [(part.index, part.count, part.stage) for _, part in split] == [
        (0, 2, "base"), (1, 2, "base"), (0, 2, "searched"), (0, 2, "slow"), (1, 2, "searched"), (1, 2, "slow")]


def test_a_timed_part_gets_its_slice_of_the_time_left_and_the_last_ones_the_deadline():
    searched, slow = Part(0, 1, "searched"), Part(0, 1, "slow")
    cut = lambda part, waiting, now: sliced(part, waiting, workers=2, deadline=1100.0, now=now)  # noqa: E731
    assert cut(searched, [slow, searched, slow] * 2 + [slow], 1000.0).until == 1025.0  # 100 s left, 8 parts, 2 at once
    assert cut(slow, [Part(0, 1, "base")], 1060.0).until == 1100.0  # among the last two: the deadline
    assert cut(Part(0, 1, "base"), [], 1000.0).until == 0.0  # a base part stops at the run's deadline alone
    assert sliced(searched, [], workers=2, deadline=0.0).until == 0.0  # no time target: no slice


def _noting(unit, config, skip, only):
    """Each part of the unit sends a note it says alike and one that counts its own cases (a ``time`` note)."""
    yield "note", "search 3/9"
    mine = [case for case in unit[1] if case not in skip]
    yield "note", f"time {len(mine)}/{len(mine)}"
    for case in mine:
        yield "begin", case
        yield "outcome", case


def test_a_split_units_parts_each_send_their_own_counts_and_the_notes_they_share_once():
    notes = []
    pool = Pool(Work(run=_noting, describe=_describe, config=None, share=lambda unit: True), Settings(workers=3, timeout=30, spares=0))
    cases = [f"c{i}" for i in range(30)]
    pool.run([("one", cases)], Callbacks(skip_for=lambda unit: set(), on_outcome=lambda unit, outcome: None, on_failed=None,
                                         on_collateral=None, on_unit_done=lambda unit, state, detail: None,
                                         on_note=lambda unit, note: notes.append(note)))
    assert notes.count("search 3/9") == 1
    counts = [int(note.split()[1].split("/")[0]) for note in notes if note.startswith("time ")]
    assert len(counts) == 3 and sum(counts) == 30
    assert notes[-3:] == [note for note in notes if note.startswith("time ")]  # held until the unit is done


def test_a_part_leaves_out_the_cases_of_the_other_parts_and_the_parts_cover_the_unit():
    cases = [f"op|float32|cpu|functional|{i}" for i in range(200)]
    parts = [[c for c in cases if c not in Leaving({cases[0]}, (i, 3))] for i in range(3)]
    assert sorted(sum(parts, [])) == sorted(cases[1:])  # a partition of what is not skipped
    assert all(len(p) > 40 for p in parts)  # and an even one
    assert [c for c in cases if c not in Leaving(set(), None)] == cases and in_part(cases[5], None)


@pytest.mark.slow
def test_a_hung_worker_is_killed_without_waiting_for_its_exit_and_every_killed_worker_is_reaped_at_close(tmp_path, monkeypatch):
    import multiprocessing.process

    joined, join = [], multiprocessing.process.BaseProcess.join

    def recorded(process, timeout=None):
        joined.append(process.pid)
        return join(process, timeout)

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "join", recorded)
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=1, timeout=1.0, spares=1))
    pool.run([("first", ["a", "hang", "b"])], Callbacks(skip_for=lambda unit: set(), on_outcome=lambda *a: None,
                                                        on_failed=lambda *a: None, on_collateral=lambda *a: None,
                                                        on_unit_done=lambda *a: None), close=False)
    hung = [pid for _, pid, what in _lines(log) if what == "case hang"]
    assert len(hung) == 2  # the case, then its replay alone: both killed at their timeout
    assert not set(hung) & set(joined)  # the parent went on without waiting for either to exit
    pool.close()
    for pid in hung:  # each was reaped, as it exited or at close: no zombie is left
        assert not os.path.exists(f"/proc/{pid}"), open(f"/proc/{pid}/stat").read()


def test_close_kills_the_workers_that_do_not_stop_together_and_waits_for_them_together(monkeypatch):
    # a GPU worker exits once the driver has torn its context down (a hung kernel's too), which takes a while: workers
    # killed and waited for one after another took that while once each
    import types

    from torchsleuth.workers import pool as pool_module

    clock = [0.0]
    monkeypatch.setattr(pool_module.time, "monotonic", lambda: clock[0])

    class Stubborn:  # ignores the word to stop; exits 1.5 s after SIGKILL
        killed = None

        def exit_time(self):
            return float("inf") if self.killed is None else self.killed + 1.5

        def is_alive(self):
            return clock[0] < self.exit_time()

        def kill(self):
            self.killed = clock[0]

        def join(self, timeout=None):
            clock[0] = min(clock[0] + timeout, max(clock[0], self.exit_time()))

    pool = Pool(Work(run=_work, describe=_describe), Settings(workers=1, timeout=1.0))
    processes = [Stubborn() for _ in range(4)]
    pool.slots = [types.SimpleNamespace(process=p, conn=types.SimpleNamespace(send=lambda message: None)) for p in processes]
    pool.close()
    assert not any(p.is_alive() for p in processes) and pool.slots == [] and pool.dying == []
    assert {p.killed for p in processes} == {2.0}  # after the 2 s they had to stop, all at once
    assert clock[0] == 3.5  # one exit's time, not four


@pytest.mark.slow
def test_a_collateral_case_says_what_its_replay_alone_gave_a_pass_or_its_status(tmp_path):
    said = []
    pool = Pool(Work(run=_work, describe=_describe, config=str(tmp_path / "log")), Settings(workers=1, timeout=1.0))
    pool.run([("first", ["a", "hang_after", "b"]), ("second", ["c", "tainted", "d"])], Callbacks(
        skip_for=lambda unit: set(), on_outcome=lambda *a: None, on_failed=lambda *a: None,
        on_collateral=lambda unit, case_id, how: said.append((case_id, how)), on_unit_done=lambda *a: None))
    assert dict(said) == {"hang_after": "it passed when run alone in a fresh worker",  # a hang set aside, replayed last
                          "tainted": "not when it ran alone in a fresh worker (its outcome there: error)"}


def test_the_sweeps_warm_up_says_a_device_that_cannot_run_a_kernel_is_unavailable(monkeypatch):
    sweep_module = sys.modules["torchsleuth.sweep"]
    monkeypatch.setattr(sweep_module, "device_works", lambda device: device == "cpu")
    config = types.SimpleNamespace(imports=(), device="cuda")
    with pytest.raises(DeviceUnavailable, match="cannot run a kernel on cuda"):
        sweep_module.warm(config)
    sweep_module.warm(types.SimpleNamespace(imports=(), device="cpu"))  # a device that works: no error
