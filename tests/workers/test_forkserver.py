"""Workers forked from the pool's fork server (workers.starts, workers.preload): warm from their first moment,
with the parent's environment as it is when each starts, and spawned instead when the server is unsafe to fork from."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from torchsleuth.workers.records import Callbacks, Settings, Work
from torchsleuth.errors import UsageError
from torchsleuth.workers.pool import Pool
from torchsleuth.workers.starts import LEAVE_CATALOG, START, default_start

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the pool forks from a server on Linux only")


def _report(unit, config, skip, only):
    """One case whose outcome says what the worker found when it began: its environment, its parent, the catalog,
    forward-mode AD's decompositions (imported at a process's first dual tensor)."""
    from torchsleuth.cases import opinfo

    yield "begin", unit
    yield "outcome", {"probe": os.environ.get("TORCHSLEUTH_TEST_PROBE"), "parent": os.getppid(),
                      "catalog": opinfo.catalog.cache_info().currsize,
                      "jvp_decompositions": "torch._decomp.decompositions_for_jvp" in sys.modules}


def _outcomes(pool: Pool, units: list) -> list:
    seen = []
    pool.run(units, Callbacks(skip_for=lambda unit: set(), on_outcome=lambda unit, outcome: seen.append(outcome),
                              on_failed=lambda *a: seen.append(("failed", a)), on_collateral=lambda *a: None,
                              on_unit_done=lambda *a: None))
    return seen


def test_forked_workers_inherit_the_catalog_and_jvp_decompositions_and_take_the_environment_as_it_is_when_they_start(monkeypatch):
    monkeypatch.setenv("TORCHSLEUTH_TEST_PROBE", "one")
    first = Pool(Work(run=_report), Settings(workers=1, timeout=60, start="forkserver", preload=("torchsleuth.sweep",)))
    [seen] = _outcomes(first, ["a"])
    assert first.context.get_start_method() == "forkserver"
    assert seen["probe"] == "one" and seen["parent"] != os.getpid()  # forked by the server, not by this process
    assert seen["catalog"] == 1  # loaded in the server (this machine has no GPU), not by the worker
    assert seen["jvp_decompositions"]  # compiled once in the server, not at each fresh worker's first forward-mode case
    assert first.where() == "local pool, 1 worker, forked from a fork server holding OpInfo's catalog: 1 cases on this machine"  # the summary says so
    monkeypatch.setenv("TORCHSLEUTH_TEST_PROBE", "two")  # after the server started: a new worker sees it all the same
    second = Pool(Work(run=_report), Settings(workers=1, timeout=60, start="forkserver"))
    [seen] = _outcomes(second, ["b"])
    assert seen["probe"] == "two"


@pytest.mark.slow
def test_a_spawned_pool_starts_each_worker_from_this_process():
    pool = Pool(Work(run=_report), Settings(workers=1, timeout=60, start="spawn"))
    [seen] = _outcomes(pool, ["a"])
    assert pool.context.get_start_method() == "spawn" and seen["parent"] == os.getpid() and seen["catalog"] == 0
    assert not seen["jvp_decompositions"]  # a fresh interpreter: what the server preloads is not there
    assert pool.where() == "local pool, 1 worker, spawned: 1 cases on this machine"


UNSAFE = """
import threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()  # a thread in the server: forking is unsafe
"""

DRIVER = """
import os
from torchsleuth.workers.records import Callbacks, Settings, Work
from torchsleuth.errors import UsageError
from torchsleuth.workers.pool import Pool
from torchsleuth.workers.starts import START, default_start
from work import report
if __name__ == "__main__":  # a spawned worker imports this file again
    seen = []
    pool = Pool(Work(run=report), Settings(workers=1, timeout=60, start="forkserver", preload=("unsafe",)))
    pool.run(["u"], Callbacks(skip_for=lambda u: set(), on_outcome=lambda u, o: seen.append(o), on_failed=lambda *a: None,
                              on_collateral=lambda *a: None, on_unit_done=lambda *a: None))
    print(pool.context.get_start_method(), seen[0] == os.getpid())
"""


# The work the drivers below give their pools: one case, whose outcome is the worker's parent.
WORK = "import os\n\ndef report(unit, config, skip, only):\n    yield 'begin', unit\n    yield 'outcome', os.getppid()\n"


def _driven(tmp_path, driver: str, env: dict | None = None, **modules: str) -> str:
    """What ``driver`` prints, run as a script in a fresh interpreter beside ``modules`` (name -> source) and WORK,
    which the fork server finds on its path too."""
    for name, source in {"work": WORK, **modules}.items():
        (tmp_path / f"{name}.py").write_text(source)
    (tmp_path / "driver.py").write_text(driver)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, str(tmp_path / "driver.py")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_a_server_with_a_thread_is_not_forked_from_the_pool_spawns(tmp_path):
    assert _driven(tmp_path, DRIVER, unsafe=UNSAFE).split() == ["spawn", "True"]  # spawned by the driver itself, and the unit ran


def test_workers_fork_for_a_cpu_or_cuda_sweep_and_spawn_beside_other_accelerators_unless_told(monkeypatch):
    monkeypatch.delenv(START, raising=False)
    assert default_start("cpu") == "forkserver" and default_start("cuda:1") == "forkserver"
    assert default_start("xpu") == "spawn" and default_start("mps") == "spawn"
    monkeypatch.setattr("sys.platform", "darwin")
    assert default_start("cpu") == "spawn"
    monkeypatch.undo()
    monkeypatch.setenv(START, "spawn")
    assert default_start("cuda") == "spawn"
    monkeypatch.setenv(START, "forkserver")
    assert default_start("xpu") == "forkserver"
    monkeypatch.setenv(START, "fork")
    with pytest.raises(UsageError, match="TORCHSLEUTH_WORKER_START='fork' is not a start method; allowed: forkserver, spawn"):
        default_start("cpu")


def _hash(unit, config, skip, only):
    yield "begin", unit
    yield "outcome", hash("xy")  # OpInfo's meshgrid samples iterate over {'xy', 'ij'}: their order follows this


@pytest.mark.slow
@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_every_worker_hashes_strings_alike_so_a_sample_index_names_one_sample(start, monkeypatch):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    pool = Pool(Work(run=_hash), Settings(workers=2, timeout=60, start=start))
    seen = _outcomes(pool, ["a", "b", "c", "d"])
    pinned = subprocess.run([sys.executable, "-c", "print(hash('xy'))"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONHASHSEED": "0"}).stdout.strip()
    assert seen == [int(pinned)] * 4
    assert os.environ.get("PYTHONHASHSEED") is None  # this process's environment is left as it was


def test_a_bad_start_method_is_one_line_and_exit_2_before_anything_is_stored(monkeypatch, capsys, tmp_path):
    from torchsleuth.cli.main import main

    monkeypatch.setenv(START, "fork")
    for command in (["ops", "--ops", "abs"], ["shard", "--ops", "sum", "--workers", "2"]):
        code = main([*command, "--out", str(tmp_path / command[0])])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == "", (code, captured)
        assert captured.err.strip() == (f"torchsleuth {command[0]}: error: TORCHSLEUTH_WORKER_START='fork' is not a start "
                                        "method; allowed: forkserver, spawn")
        assert not (tmp_path / command[0]).exists()  # no store, no run begun


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # the decompositions' import
def test_the_servers_preload_run_here_loads_the_catalog_on_one_thread_unless_told_to_leave_it(monkeypatch):
    """workers.preload, which otherwise runs only in the fork server, imported (and run again) in this process on a
    CPU: torch on one thread, forward-mode AD's decompositions and the catalog loaded, or the catalog left to the
    workers when a server before was left unsafe; and a process holding a second thread is not safe to fork from."""
    import importlib
    import threading

    import torch

    from torchsleuth.cases import opinfo

    if torch.cuda.is_available():
        pytest.skip("beside a GPU the server loads the catalog another way (the tests below play it on the CPU)")
    threads = torch.get_num_threads()
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # what the module sets: undone after the test
    monkeypatch.delenv(LEAVE_CATALOG, raising=False)
    try:
        from torchsleuth.workers import preload

        importlib.reload(preload)  # its module run here, whether or not this process imported it before
        assert torch.get_num_threads() == 1 and "torch._decomp.decompositions_for_jvp" in sys.modules
        assert preload.CATALOG is True and opinfo.catalog.cache_info().currsize == 1
        monkeypatch.setenv(LEAVE_CATALOG, "0")
        importlib.reload(preload)
        assert preload.CATALOG is False
    finally:
        torch.set_num_threads(threads)
    assert not preload._driver_initialized()  # no CUDA driver on this machine
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)
    helper.start()
    try:
        assert not preload.safe_to_fork()
    finally:
        stop.set()
        helper.join()


# The fork server beside a GPU, played on this CPU: torch.cuda.is_available() made to say True before the server's
# module is imported, as NVML says it on a GPU machine (then OpInfo's modules take their CUDA branches, as there).
BESIDE_A_GPU = """
import json, os, sys, threading
import torch
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
{before}
from torchsleuth.cases import opinfo
from torchsleuth.workers import preload
import torch.utils._triton as triton
before = (preload.CATALOG, opinfo.catalog.cache_info().currsize)
loaded = preload.load_catalog_beside_a_gpu((9, 0))
entry = opinfo.catalog().get("nn.functional.gelu") if loaded else None
print(json.dumps({{"before": before, "loaded": loaded, "currsize": opinfo.catalog.cache_info().currsize,
                  "restored": [torch.cuda._lazy_init.__name__, torch.cuda.get_device_capability.__name__, triton.has_triton.__name__],
                  "cuda_dtypes": sorted(str(d) for d in entry.supported_dtypes("cuda")) if entry else None,
                  "threads": threading.active_count(), "numba": "numba" in sys.modules,
                  "numba_asked": os.path.exists(os.environ.get("NUMBA_ASKED", "/nonexistent"))}}))
"""

# A numba whose CUDA check does what the real one does to a fork server (initializes the driver): here it starts a
# thread, which leaves a process as unsafe to fork from, and leaves a mark.
FAKE_NUMBA_CUDA = """
import os, threading, time


def is_available():
    open(os.environ["NUMBA_ASKED"], "w").close()
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    return True
"""


# What a real numba-cuda installs at startup (a .pth): a finder that sends `import numba.cuda` to its own package.
NO_NUMBA_HOOK = "sys.meta_path[:] = [f for f in sys.meta_path if 'numba' not in getattr(f, '__module__', '') + type(f).__module__]"


def _beside_a_gpu(before: str = "", env: dict | None = None) -> dict:
    import json

    # workers.preload's own load at import left out (as in a server started after an unsafe one): beside a real GPU it would
    # load the catalog before the test's stand-ins are in place; the test makes the load itself
    done = subprocess.run([sys.executable, "-c", BESIDE_A_GPU.format(before=before)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, LEAVE_CATALOG: "0", **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_beside_a_gpu_the_server_loads_the_catalog_with_the_capability_nvml_gives_and_asks_the_device_nothing():
    found = _beside_a_gpu()
    assert found["before"] == [False, 0]  # nothing loaded at import
    assert found["loaded"] and found["currsize"] == 1
    assert found["restored"] == ["_lazy_init", "get_device_capability", "has_triton"]  # torch's own again
    assert "torch.bfloat16" in found["cuda_dtypes"] and "torch.float16" in found["cuda_dtypes"]  # SM53OrLater held


@pytest.mark.slow
def test_beside_a_gpu_a_catalog_that_asks_the_device_more_is_left_to_the_workers_and_nothing_is_made_or_kept():
    # a module of the catalog asking what would make a CUDA context (as a device count taken from the driver does)
    found = _beside_a_gpu(before="torch.cuda.device_count = lambda: torch.cuda._lazy_init() or 1")
    assert not found["loaded"] and found["currsize"] == 0
    assert found["restored"] == ["_lazy_init", "get_device_capability", "has_triton"]


@pytest.mark.slow
def test_beside_a_gpu_numbas_cuda_check_is_kept_out_of_the_load_and_numba_is_importable_after(tmp_path):
    (tmp_path / "numba" / "cuda").mkdir(parents=True)
    (tmp_path / "numba" / "__init__.py").write_text("")
    (tmp_path / "numba" / "cuda" / "__init__.py").write_text(FAKE_NUMBA_CUDA)
    mark = tmp_path / "asked"
    # the fake first on the path, and no import hook of a real numba-cuda (its .pth sends `numba.cuda` to its own package)
    fake = f"sys.path.insert(0, {str(tmp_path)!r}); {NO_NUMBA_HOOK}"
    found = _beside_a_gpu(before=fake, env={"NUMBA_ASKED": str(mark)})
    assert found["loaded"] and found["threads"] == 1 and not found["numba_asked"] and not found["numba"]
    # without the server's care the same catalog asks it (the fake is real enough to be asked)
    plain = subprocess.run([sys.executable, "-c", f"import sys; {fake}; import torch; "
                            "torch.cuda.is_available = lambda: True; torch.cuda.device_count = lambda: 1; "
                            "import torch.testing._internal.common_cuda"], env={**os.environ, "NUMBA_ASKED": str(mark)},
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert mark.exists()


# What a module below torch might do while the catalog loads (numba's CUDA check did it beside a GPU): here, start a
# thread in the server, which leaves it as unsafe to fork from.
UNSAFE_CATALOG = """
import threading, time
from torchsleuth.cases import opinfo
loaded = opinfo.catalog
def catalog():
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    return loaded()
catalog.cache_info = loaded.cache_info
opinfo.catalog = catalog
"""

RESTART = """
import os
from torchsleuth.workers.records import Callbacks, Settings, Work
from torchsleuth.workers.pool import Pool
from torchsleuth.workers import starts
from work import report
if __name__ == "__main__":
    seen = []
    pool = Pool(Work(run=report), Settings(workers=1, timeout=60, start="forkserver", preload=("unsafe_catalog",)))
    pool.run(["u"], Callbacks(skip_for=lambda u: set(), on_outcome=lambda u, o: seen.append(o), on_failed=lambda *a: None,
                              on_collateral=lambda *a: None, on_unit_done=lambda *a: None))
    print(pool.context.get_start_method(), starts.server_holds_catalog(), seen[0] != os.getpid())
    print(pool.where())
"""


@pytest.mark.slow
def test_a_server_that_loading_the_catalog_left_unsafe_is_replaced_by_one_that_leaves_it_to_the_workers(tmp_path):
    printed = _driven(tmp_path, RESTART, unsafe_catalog=UNSAFE_CATALOG)
    first, where = printed.strip().splitlines()[-2:]
    assert first.split() == ["forkserver", "False", "True"]  # forked, from a server without the catalog, not spawned
    assert where == "local pool, 1 worker, forked from a fork server: 1 cases on this machine"


# A module the server preloads that waits for the test's word before it finishes, and says when it has.
SLOW = """
import os, time
while not os.path.exists(os.environ["GO"]):
    time.sleep(0.05)
open(os.environ["LOADED"], "w").close()
"""

BEGIN = """
import os, sys
from torchsleuth.workers import starts
if __name__ == "__main__":
    starts.begin("forkserver", ("slow",))
    returned_before_loaded = not os.path.exists(os.environ["LOADED"])  # begin did not wait for the server's preload
    open(os.environ["GO"], "w").close()
    context = starts.start_context("forkserver", ("other",))  # the server begun is the one asked, with its preload
    print(returned_before_loaded, os.path.exists(os.environ["LOADED"]), context.get_start_method(),
          starts.server_holds_catalog(), "other" in sys.modules)
"""


@pytest.mark.slow
def test_a_fork_server_begun_early_loads_while_its_caller_goes_on_and_is_the_one_the_pool_asks(tmp_path):
    printed = _driven(tmp_path, BEGIN, {"GO": str(tmp_path / "go"), "LOADED": str(tmp_path / "loaded")}, slow=SLOW, other="")
    assert printed.split() == ["True", "True", "forkserver", "True", "False"]


# Driver code: ``watch(module, name)`` makes each call of ``module.name`` note whether the fork server is running.
WATCH = """
import multiprocessing.forkserver
seen = []
def watch(module, name):
    original = getattr(module, name)
    def watched(*args, **kwargs):
        seen.append(multiprocessing.forkserver._forkserver._forkserver_pid is not None)
        return original(*args, **kwargs)
    setattr(module, name, watched)
"""

# A sweep whose planning asks whether the fork server is already running (it plans while the server loads).
PLANNING = WATCH + """
import importlib
sweeping = importlib.import_module("torchsleuth.sweep")  # the module (the package names its function sweep)
from torchsleuth.cases import select
from torchsleuth.config import SweepConfig
from torchsleuth.cases.select import resolve_ops
if __name__ == "__main__":
    watch(select, "units")
    config = SweepConfig(ops=resolve_ops("abs"), dtypes=("float32",), variants=("functional",), layouts=("contiguous",),
                         samples=2, workers=1, shrink=False)
    result = sweeping.sweep(config, db={db!r})
    print(seen, result.cases > 0, sweeping.PRELOAD)
"""


@pytest.mark.slow
def test_a_sweep_with_workers_starts_the_fork_server_before_it_plans_its_units(tmp_path):
    printed = _driven(tmp_path, PLANNING.format(db=str(tmp_path / "runs.db")))
    assert printed.split() == ["[True]", "True", "('torchsleuth.sweep',)"]


# `torchsleuth ops` asked, as it resolves the ops (the catalog's load in this process), whether the fork server runs.
RESOLVING = WATCH + """
from torchsleuth.cases import select
from torchsleuth.cli.main import main
if __name__ == "__main__":
    watch(select, "resolve_ops")
    code = main(["ops", "--ops", "abs", "--dtypes", "float32", "--variants", "functional", "--layouts", "contiguous",
                 "--no-shrink", "--no-progress", "--no-compile", "--out", {out!r}, "--workers", {workers!r}])
    print(seen, code)
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "0"])
def test_the_ops_command_starts_the_fork_server_before_it_loads_the_catalog_to_resolve_its_ops(tmp_path, workers):
    printed = _driven(tmp_path, RESOLVING.format(out=str(tmp_path / "out"), workers=workers))
    last = printed.strip().splitlines()[-1].split()  # after the command's own summary
    assert last == (["[True]", "0"] if workers == "1" else ["[False]", "0"])  # no pool, no server
