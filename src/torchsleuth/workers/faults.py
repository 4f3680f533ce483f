"""Where in a case its worker died or hung: the Python stack at that moment, as a place a finding can name.

Design note. A case is more than its call: the engine traces the call under a
dispatch mode, takes its references, and an oracle makes calls of its own
(forward-mode derivatives, a compile, a vmap). A kernel can crash in one of
those steps only, so a crash finding that names the case alone sends its
reader to a call that returns (a forward-mode derivative that segfaults only
under a ``TorchDispatchMode``: bench/search-findings.md, g-90d80ee8). The
dying worker cannot send anything, so each worker has ``faulthandler`` write
every thread's Python stack to a file of its own (``arm``): on a fatal signal
(SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) by itself, and on ``DUMP`` when the
pool asks before it kills a worker that hangs. The pool reads the file
(``place``) and adds the innermost frames of torchsleuth's own code, or of code
outside torch and Python's library (a user's ``--import`` module), to what it
reports: ``at run/trace.py:113 __torch_dispatch__ < run/call.py:268 traced``.
Nothing is written while cases pass, so it costs nothing then.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import os
import re
import signal
import sysconfig
import time

# The signal that asks a worker for its stacks (its handler is faulthandler's own, in C: it answers while the
# worker is stuck inside a kernel).
DUMP = signal.SIGUSR1

# How long the pool waits for a hanging worker's stacks before it kills it.
DUMP_SECONDS = 1.0

_FRAME = re.compile(r'^\s+File "(?P<path>.*)", line (?P<line>\d+) in (?P<function>.*)$')
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../torchsleuth

_armed = []  # the open file, kept alive as long as the worker


def arm(directory: str) -> None:
    """In a worker: write this process's stacks to ``directory/<pid>`` on a fatal signal and on ``DUMP``."""
    stacks = open(os.path.join(directory, str(os.getpid())), "w")
    _armed.append(stacks)
    faulthandler.enable(file=stacks, all_threads=True)
    faulthandler.register(DUMP, file=stacks, all_threads=True, chain=False)


def ask(pid: int, directory: str) -> None:
    """Have a live worker write its stacks, waiting up to ``DUMP_SECONDS`` for them."""
    path = os.path.join(directory, str(pid))
    try:
        os.kill(pid, DUMP)
    except OSError:
        return
    deadline = time.monotonic() + DUMP_SECONDS
    size = -1
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = os.path.getsize(path) if os.path.exists(path) else 0
        if now and now == size:  # written, and no longer growing
            return
        size = now


def place(pid: int, directory: str) -> str:
    """`` at A < B < C``: the innermost frames that say something (``_ours``) in the worker's last stacks ('' if none
    were written); the file is removed."""
    path = os.path.join(directory, str(pid))
    try:
        with open(path) as f:
            text = f.read()
        os.remove(path)
    except OSError:
        return ""
    frames = _ours(_thread(text))
    return " at " + " < ".join(frames) if frames else ""


def placed(detail: str) -> str:
    """The place ``place`` added to a crash's or a hang's detail ('' if none): ``run/trace.py:113 __torch_dispatch__ < ...``."""
    match = _PLACED.search(detail)
    return match[1] if match else ""


_PLACED = re.compile(r" at (\S+\.py:\d+ \S+(?: < \S+\.py:\d+ \S+)*)$")


def _thread(text: str) -> list[tuple[str, str, str]]:
    """The frames (path, line, function; innermost first) of the thread that was running the case: the one
    faulthandler calls current when it runs torchsleuth's code, else the first thread that does."""
    threads: list[tuple[bool, list]] = []
    for line in text.splitlines():
        if line.startswith(("Current thread", "Thread 0x")):
            threads.append((line.startswith("Current"), []))
        elif threads and (match := _FRAME.match(line)):
            threads[-1][1].append((match["path"], match["line"], match["function"]))
    running = [frames for _, frames in threads if any(_in_package(path) for path, _, _ in frames)]  # the case's thread
    current = [frames for is_current, frames in threads if is_current and frames in running]
    return (current or running or [[]])[0]


def _in_package(path: str) -> bool:
    return os.path.abspath(path).startswith(_PACKAGE + os.sep)


def _told(path: str) -> bool:
    """Whether a frame's file says something: torchsleuth's own, or code outside torch and Python's library (a user's
    ``--import`` module, the kernel it launches)."""
    if _in_package(path):
        return True
    if path.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    return not os.path.abspath(path).startswith(_LIBRARIES)


def _libraries() -> tuple[str, ...]:
    torch_spec = importlib.util.find_spec("torch")
    found = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
    if torch_spec is not None and torch_spec.origin:
        found.append(os.path.dirname(torch_spec.origin))
    return tuple(os.path.abspath(path) + os.sep for path in found)


_LIBRARIES = _libraries()


def _ours(frames: list[tuple[str, str, str]], most: int = 3) -> list[str]:
    """The innermost ``most`` frames that say something (``_told``): torchsleuth's as ``run/trace.py:113
    __torch_dispatch__``, another file's by its whole path; the pool's own loop (the worker's main) left out."""
    found = []
    for path, line, function in frames:
        if not _told(path) or function in ("_worker_main", "unit_events"):
            continue
        where = os.path.relpath(os.path.abspath(path), _PACKAGE) if _in_package(path) else os.path.abspath(path)
        found.append(f"{where}:{line} {function}")
        if len(found) == most:
            break
    return found
