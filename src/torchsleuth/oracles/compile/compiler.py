"""Compiling a case's call with inductor: one compiled function reused while dynamo allows, caches kept apart.

Design note. Compiling costs about a second a graph on the CPU, so the
compile oracle keeps one compiled function per op, variant, dtype, device
and shape mode (static or dynamic) while a worker's cases stay on it;
dynamo recompiles it for each new shape or layout, and is reset when the
cases move on, before its recompile limit (8), and before a case id runs a
second time (a shrink replay must compile again to see a change made by
compiling).

Storage offsets. Dynamo's guards check a tensor's sizes and strides, not its
storage offset, so a graph compiled for a tensor at offset 0 would be reused
for the same tensor at an offset. Inductor reads an input's alignment when it
compiles, so a graph for an input at an offset is another graph, and a
repro script compiles for the offset its case has. So which arguments sit at an offset is part of
the scope: a case at an offset is compiled for it, as its repro is, and a
diagnosis neighbour at an offset does not inherit its group's graph (it did:
one compiled group's verdict changed between two runs of the same sweep).

Caches. Inductor's on-disk FX-graph and AOTAutograd caches are off for these
compiles: a cache hit skips the decompositions and lowerings, where a state
change or a wrong lowering would happen, so results would depend on what an
earlier run left on disk. Its kernel cache (the generated C++ or Triton
source and the built library) cannot be turned off; it is keyed by a hash
of the generated source, so another lowering is another entry, and written
by renaming a finished file into place under a lock, so a worker killed
mid-compile leaves nothing half-written. Workers share one folder of
torchsleuth's own (``TORCHINDUCTOR_CACHE_DIR``: ``torchsleuth-inductor-UID``
in the temporary folder), apart from the user's own compiles: a folder per
worker would cost each fresh worker inductor's cold start again (its first
compile took 55 s instead of 17 s on 2 loaded cores, 2026-12-07), and
would keep nothing a shared one lets through.

Compile threads. Where Triton is installed, inductor starts a pool of
``min(32, cores)`` compile processes at a process's first compile, each
importing torch: sixteen sweep workers on a sixteen-core GPU host started
sixteen pools of sixteen, and the catalog with the compiled variant did not
end a sixteenth of its ops in 400 s on an H100 (2026-12-07). The sweep is
parallel by case already, so each compile runs in its own worker, with no
pool (``compile_threads=1``, in ``uncached``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Callable

import torch

from ...cases import layouts
from ...cases.records import Case

# Compiles of one function before dynamo is reset (its recompile limit is 8).
RECOMPILES = 6


class Compiler:
    """One compiled function per (op, variant, dtype, device, dynamic, arguments at an offset); dynamo reset between them."""

    def __init__(self):
        self.scope = None
        self.function = None
        self.compiled = None
        self.graphs = 0  # graphs inductor compiled for the current function
        self.seen: set[str] = set()

    def get(self, case: Case, function: Callable, *, dynamic: bool = False):
        """The compiled ``call_op(args, kwargs)`` of ``function``."""
        scope = (case.op, case.variant, case.dtype, case.device, dynamic, _at_offset(case))
        if scope != self.scope or function is not self.function or case.id in self.seen or self.graphs >= RECOMPILES:
            torch._dynamo.reset()
            self.scope, self.function, self.graphs = scope, function, 0
            self.compiled = torch.compile(_caller(function), backend=self._backend, fullgraph=True, dynamic=dynamic)
        self.seen.add(case.id)
        return self.compiled

    def _backend(self, graph, example_inputs):
        self.graphs += 1
        return torch._dynamo.lookup_backend("inductor")(graph, example_inputs)


def _at_offset(case: Case) -> tuple[str, ...]:
    """The arguments a case lays out at a storage offset (``offset`` and the layouts combined with it)."""
    return tuple(path for path, name in case.layouts if "offset" in layouts.parts_of(name))


def _caller(function: Callable) -> Callable:
    def call_op(args, kwargs):
        return function(*args, **kwargs)

    return call_op


COMPILER = Compiler()


def uncached():
    """Inductor's on-disk caches off for one compile (the flags moved between releases), in this process's own
    kernel cache folder, and no pool of compile processes (the sweep's workers are its parallelism)."""
    _own_cache_dir()
    stack = contextlib.ExitStack()
    import torch._inductor.config as inductor_config

    if hasattr(inductor_config, "compile_threads"):
        stack.enter_context(inductor_config.patch(compile_threads=1))
    if hasattr(inductor_config, "fx_graph_cache"):
        stack.enter_context(inductor_config.patch(fx_graph_cache=False))
    try:
        import torch._functorch.config as functorch_config

        if hasattr(functorch_config, "enable_autograd_cache"):
            stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
    except ImportError:
        pass
    return stack


def _own_cache_dir() -> None:
    """``TORCHINDUCTOR_CACHE_DIR`` set to torchsleuth's own folder (a forked worker inherits it)."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR", "").startswith(_FOLDER):
        return
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _FOLDER


_FOLDER = os.path.join(tempfile.gettempdir(), f"torchsleuth-inductor-{getattr(os, 'getuid', lambda: 0)()}")
