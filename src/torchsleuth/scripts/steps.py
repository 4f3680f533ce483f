"""The repro script of a crash in an oracle's own steps: the call under each setup an oracle gives it, least first.

Design note. An oracle calls the op in ways a script of the plain call does
not: with forward-mode AD (dual tensors), with reverse mode, and under a
``TorchDispatchMode`` (torchsleuth's trace is one; so are ``FlopCounterMode``
and ``DebugMode``). A crash there is PyTorch's (forward-mode AD of ``addcmul``
with ``value != 1`` under any dispatch mode kills the process on torch 2.13)
once a script of its own makes the same steps, and torchsleuth's own failure
otherwise, which the script then says by exiting 0.

The script rebuilds the call's tensors exactly and walks a ladder of steps
(``steps``), each in a child process of its own so that a crash kills only
the child: the call alone; the call with each CPU storage re-homed between
guard bytes (``guarded``: a kernel that writes past its storage's end
corrupts the heap, which kills the sweep's worker later, in torchsleuth's own
code, but may kill a short script never, so the guard bytes are read back
instead); forward mode and reverse mode with respect to each floating
tensor; then the same under a dispatch mode that only passes each op on
(``PassThrough``). The first step whose child dies is the least setup that
crashes, the minimised repro, and the script prints it and exits 1; a step
that raises is loud, not this bug, and the ladder goes on; none crashing
exits 0. The functions below are real code copied into the script
(``inspect.getsource``), as the repro kit's are.

The ladder takes the derivatives the case took (``derivatives``): both modes
for the autodiff oracle's case, reverse mode for a ``backward`` case, none
for any other case of the references and contracts, whose call the sweep
makes under its trace's dispatch mode too. Another oracle's case makes calls
the ladder does not (a vmap, tiled tensors, a compile): ``derivatives`` is
None for it. The shrink stage runs this script on every crash it can
(shrink.attribute), so a crash counts against the op only once a script of
its own reproduces it.
"""

from __future__ import annotations

import inspect
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..cases.records import Case
from ..judge.records import Finding
from ..run.records import CallSpec
from . import kit, parts
from .kit import leaves

# A step's child still running after this many seconds hangs (a crash's other face).
STEP_SECONDS = kit.HANG_SECONDS
# The derivative modes a ladder may take, in its order.
MODES = ("forward", "reverse")
# What the script prints before the step it names (shrink.attribute reads it back).
LEAST = "the least setup that crashes is step "
# The guard bytes on either side of a re-homed storage (``guarded``), and the exit status of a step that changed them.
GUARD_BYTES = 4096
GUARD_STATUS = 3
# How the script names a write the guarded step caught (shrink.attribute reads it back).
CAUGHT = "caught between guard bytes; such a write corrupts the heap"


class PassThrough(TorchDispatchMode):
    """A dispatch mode that passes every op on unchanged, as a tracer or a flop counter does."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def tensor_leaves(value):
    """The tensors of a call's result."""
    return [v for _, v in leaves(value) if isinstance(v, torch.Tensor)]


def forward_mode(T, path):
    """The call with ``T[path]`` a dual tensor (tangent all ones), each output's tangent read."""
    fw = torch.autograd.forward_ad
    with fw.dual_level():
        dual = fw.make_dual(T[path].detach(), torch.ones_like(T[path]))
        out = call({**{p: t.detach() for p, t in T.items()}, path: dual})  # noqa: F821 (the script's call)
        return [fw.unpack_dual(o).tangent for o in tensor_leaves(out)]


def reverse_mode(T, path):
    """The gradient of the call's outputs (cotangents all ones) with respect to ``T[path]``."""
    x = T[path].detach().requires_grad_(True)
    outs = [o for o in tensor_leaves(call({**T, path: x})) if o.requires_grad]  # noqa: F821 (the script's call)
    return torch.autograd.grad(outs, [x], [torch.ones_like(o) for o in outs], allow_unused=True) if outs else None


def guarded(T):
    """The call with each CPU storage copied between guard bytes; exits GUARD_STATUS when the call changed one."""
    homes, moved = {}, dict(T)
    for path, t in T.items():
        if t.device.type == "cpu" and not t.requires_grad:
            size = t.untyped_storage().nbytes()
            home = bytearray(b"\xa5" * (2 * GUARD_BYTES + size))
            flat = torch.frombuffer(home, dtype=torch.uint8, count=size, offset=GUARD_BYTES) if size else torch.empty(0, dtype=torch.uint8)
            flat.copy_(torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()))
            moved[path] = flat.view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())
            homes[path] = (home, size)
    call(moved)  # noqa: F821 (the script's call)
    for path, (home, size) in homes.items():
        below = [GUARD_BYTES - i for i in range(GUARD_BYTES) if home[i] != 0xA5]
        above = [i - GUARD_BYTES - size + 1 for i in range(GUARD_BYTES + size, len(home)) if home[i] != 0xA5]
        if below or above:
            reach = " and ".join(([f"{max(below)} bytes before the start"] if below else []) + ([f"{max(above)} bytes past the end"] if above else []))
            print(f"writes as far as {reach} of {path}'s storage", file=sys.stderr)
            sys.exit(GUARD_STATUS)


def steps(T):
    """(what the step does, the step): the call alone, the call between guard bytes, then each derivative the case took
    (``DERIVATIVES``), then all but the guarded call under a dispatch mode."""
    floating = [p for p, t in T.items() if t.is_floating_point() or t.is_complex()]
    plain = [("the call", lambda: call(T))]  # noqa: F821 (the script's call)
    guard = [("the call, each CPU storage between guard bytes it must not write", lambda: guarded(T))]
    if not any(t.device.type == "cpu" and not t.requires_grad for t in T.values()):
        guard = []
    if "forward" in DERIVATIVES:  # noqa: F821 (the script's constant)
        plain += [(f"forward-mode AD with respect to {p}", lambda p=p: forward_mode(T, p)) for p in floating]
    if "reverse" in DERIVATIVES:  # noqa: F821 (the script's constant)
        plain += [(f"reverse-mode AD with respect to {p}", lambda p=p: reverse_mode(T, p)) for p in floating]

    def under_mode(step):
        def run():
            with PassThrough():
                return step()
        return run

    modes = [(f"{words}, under a TorchDispatchMode that passes every op on", under_mode(step)) for words, step in plain]
    return plain[:1] + guard + plain[1:] + modes


MAIN = '''
def main():
    T = tensors()
    ladder = steps(T)
    chosen = os.environ.get("TORCHSLEUTH_REPRO_STEP")
    if chosen is not None:  # a child: make one step
        torch.manual_seed(CALL_SEED)
        ladder[int(chosen)][1]()
        return 0
    print("torchsleuth repro: the call must not crash the process under the setups an oracle gives it")
    print("call:", CALL)
    describe(T)
    for i, (words, _) in enumerate(ladder):
        env = dict(os.environ, TORCHSLEUTH_REPRO_STEP=str(i))
        try:
            child = subprocess.run([sys.executable, __file__], env=env, timeout=STEP_SECONDS, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            print(f"step {i}: {words}: still running after {STEP_SECONDS} s")
            print("BUG PRESENT: the least setup that hangs is step", i, "-", words + ":", SUMMARY)
            return 1
        if child.returncode == GUARD_STATUS:  # wrote outside a storage: the heap corruption that kills a process later
            wrote = child.stderr.strip().splitlines()[-1]
            print(f"step {i}: {words}: the call {wrote}")
            print(f"BUG PRESENT: {LEAST}{i} - the call {wrote} ({CAUGHT}):", SUMMARY)
            return 1
        if child.returncode == 2:  # raised: loud, so not this bug
            print(f"step {i}: {words}: raises ({child.stderr.strip().splitlines()[-2] if child.stderr.strip() else ''})")
            continue
        if child.returncode != 0:
            print(f"step {i}: {words}: the process died (exit status {child.returncode})")
            print(f"BUG PRESENT: {LEAST}{i} - {words}:", SUMMARY)
            return 1
        print(f"step {i}: {words}: returns")
    print("OK: no step crashes (where a sweep saw this crash, the crash was torchsleuth's own)")
    return 0
'''

SOURCE = (PassThrough, tensor_leaves, forward_mode, reverse_mode, guarded, steps)


def derivatives(finding: Finding) -> tuple[str, ...] | None:
    """The derivative modes the finding's case took, which its ladder takes too; None where the case made calls of an
    oracle the ladder does not make (see the design note)."""
    case = Case.parse(finding.case_id)
    family = case.oracle.split(":", 1)[0]
    if family == "autodiff":
        return MODES
    if family:
        return None
    return ("reverse",) if case.variant == "backward" else ()


def script(finding: Finding, torch_version: str, where: str, imports: tuple[str, ...] = ()) -> str:
    """The ladder's script for a crash or hang in ``where`` (the case's own steps); the place it died when there is no call
    to write out. ``imports``: the run's ``--import`` modules, which the script (and each step's child) imports first."""
    call = parts.writable_call(finding)
    if call is None:
        return parts.died_in_steps(finding, torch_version, where)
    return "\n".join(parts.importing(lines(finding, call, torch_version), imports))


def lines(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    """The ladder's script for ``call``, as lines (the generic script's check of a crash or hang: scripts.checks)."""
    constants = [f"CALL = {parts.call_source(call)!r}", f"STEP_SECONDS = {STEP_SECONDS!r}  # a step still running after this hangs",
                 f"DERIVATIVES = {derivatives(finding) or ()!r}  # the derivative modes the case took, each a step per floating tensor",
                 f"LEAST = {LEAST!r}",
                 f"GUARD_BYTES = {GUARD_BYTES!r}  # on either side of a storage in the guarded step", f"GUARD_STATUS = {GUARD_STATUS!r}",
                 f"CAUGHT = {CAUGHT!r}"]
    text = parts.preamble(finding, call, torch_version, ("leaves",), constants, imports=("os", "subprocess"))
    text += ["", "from torch.utils._python_dispatch import TorchDispatchMode"]
    text += parts.function_lines(call) + parts.tensors_function(call)
    text += ["", "", "\n\n\n".join(_plain(inspect.getsource(f)) for f in SOURCE), "", "", *MAIN.strip("\n").split("\n")]
    return text + parts.data_block(call) + parts.footer()


def _plain(source: str) -> str:
    """A function's source without the lint notes that only make sense here."""
    return source.rstrip("\n").replace("  # noqa: F821 (the script's call)", "").replace("  # noqa: F821 (the script's constant)", "")
