"""The repro kit: the helpers every generated script contains, as real code.

Design note. A repro script needs only torch, so the few functions it runs
(rebuild a tensor exactly, pair up a result's leaves, compare them, show the
worst elements, read a whole storage, ...) travel inside it. They are
written here as ordinary functions, linted and tested like the rest of
torchsleuth, and ``source(*names)`` copies them into a script with
``inspect.getsource``, together with whatever of the kit they call.

The helpers read a script's own constants as globals: ``ATOL``/``RTOL``
(``agree``), ``GRAD_PATHS`` (``gradients``), ``IMPORTS`` (``load_imports``).
The values below are only what plain use of the kit sees (an exact
comparison, nothing to import); ``source`` never copies them, each script
writes its own. ``GLOBALS`` is the kit's one piece of state: it is copied
with ``load_imports``, which fills it.

The constants a script must share with the sweep are imported from where the
sweep keeps them, never copied: ``CALL_SEED`` and ``prefills`` come from
run.call (scripts.parts, scripts.checks), and ``HANG_SECONDS`` below is the
sweep's default time limit of a case (config).
"""

from __future__ import annotations

import ast
import base64
import functools
import importlib
import inspect
import runpy
import sys
import types
import zlib

import torch

from ..config import DEFAULT_TIMEOUT

# Seconds a child may run before an isolation check calls it a hang.
HANG_SECONDS = DEFAULT_TIMEOUT

# A script's own constants (see the design note): what plain use of the kit sees.
ATOL, RTOL = 0.0, 0.0
GRAD_PATHS: tuple[str, ...] = ()
IMPORTS: tuple[str, ...] = ()

GLOBALS = []  # keeps an imported file's torch.library objects alive


# --- the helpers, copied into scripts -----------------------------------------------------


def rebuild(dtype, device, numel, shape, stride, offset, data=None, seed=0, requires_grad=False, tiled=()):
    """One argument exactly as the kernel saw it: the whole storage (gaps and
    guard values included), viewed with the recorded shape, stride and offset.
    ``tiled`` (dim, period): ``data`` holds the first ``period`` entries along
    ``dim`` of a storage too large to carry, which is them tiled."""
    dtype = getattr(torch, dtype)
    if data is not None:
        raw = bytearray(zlib.decompress(base64.b85decode(data)))
        flat = torch.frombuffer(raw, dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
        if tiled:  # the first entries along dim, then the storage's elements past the tensor: tile them back
            dim, period = tiled
            base_shape = [period if d == dim else n for d, n in enumerate(shape)]
            count = 1
            for n in base_shape:
                count *= n
            reps = [-(-shape[dim] // period) if d == dim else 1 for d in range(len(shape))]
            whole = flat[:count].reshape(base_shape).repeat(*reps).narrow(dim, 0, shape[dim]).reshape(-1)
            flat = torch.cat([whole, flat[count:]])
    else:
        flat = seeded(dtype, numel, seed)
    view = flat.to(device).as_strided(shape, stride, offset).detach()
    return view.requires_grad_(requires_grad)


def seeded(dtype, numel, seed):
    """Stand-in values for a storage too large to carry inline."""
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(numel, generator=generator, dtype=torch.float64).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=generator).bool()
    return torch.randint(0, 10, (numel,), generator=generator).to(dtype)


def leaves(value, path="out"):
    """The tensors and numbers of a result, with paths as torchsleuth names them."""
    if isinstance(value, dict):
        return [(str(key), item) for key, item in value.items()]
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return [leaf for i, item in enumerate(value) for leaf in leaves(item, f"{path}[{i}]")]
    return [(path, value)]


def copies(T, device=None, wide=False):
    """Contiguous copies in fresh storages (on ``device``; floats in float64 if ``wide``)."""
    found = {}
    for path, t in T.items():
        c = t.detach() if device is None else t.detach().to(device)
        if wide and (c.dtype.is_floating_point or c.dtype.is_complex):
            c = c.to(torch.complex128 if c.dtype.is_complex else torch.float64)
        found[path] = c.clone(memory_format=torch.contiguous_format).requires_grad_(t.requires_grad)
    return found


def gradients(function, T):
    """The input gradients of ``function`` given the recorded output gradients."""
    outputs = [t for _, t in leaves(function(T)) if isinstance(t, torch.Tensor) and (t.dtype.is_floating_point or t.dtype.is_complex)]
    pairs = [(t, T[f"grad_output[{i}]"]) for i, t in enumerate(outputs) if t.requires_grad]
    if not pairs:
        return {}
    inputs = [T[path] for path in GRAD_PATHS]
    grads = torch.autograd.grad([t for t, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True)
    return {f"grad[{path}]": g for path, g in zip(GRAD_PATHS, grads)}


def compare(actual, expected, *, values=True, bitwise=False, cast=False):
    """Pairs the leaves up in order and prints each pair that differs; True if all agree."""
    if len(actual) != len(expected):
        print(f"structure: expected {[p for p, _ in expected]}, got {[p for p, _ in actual]}")
        return False
    results = [agree(path, a, e, values=values, bitwise=bitwise, cast=cast) for (path, a), (_, e) in zip(actual, expected)]
    return all(results)


def agree(path, a, e, *, values, bitwise, cast):
    """One pair: metadata first, then every element within ATOL + RTOL * |e| (NaN matches NaN)."""
    if not isinstance(a, torch.Tensor) or not isinstance(e, torch.Tensor):
        if isinstance(a, (int, float, complex)) and isinstance(e, (int, float, complex)) and not isinstance(e, bool):
            a, e = torch.tensor(a), torch.tensor(e)
        else:
            if a != e:
                print(f"{path}: expected {e!r}, got {a!r}")
            return a == e
    if a.shape != e.shape:
        print(f"{path}: expected shape {list(e.shape)}, got {list(a.shape)}")
        return False
    e = e.to(a.dtype) if cast else e
    if a.dtype != e.dtype:
        print(f"{path}: expected dtype {e.dtype}, got {a.dtype}")
        return False
    if not values:
        print(f"{path}: shape {list(a.shape)} and dtype {a.dtype} as expected")
        return True
    a = a.detach().resolve_conj().resolve_neg().cpu()
    e = e.detach().resolve_conj().resolve_neg().cpu()
    inexact = a.dtype.is_floating_point or a.dtype.is_complex
    work = torch.complex128 if a.dtype.is_complex else torch.float64
    diff = (a.to(work) - e.to(work)).abs()
    if bitwise:
        allowed = torch.zeros_like(diff)
        bad = ~same_bits(a, e)
    elif inexact:
        allowed = ATOL + RTOL * e.to(work).abs()
        nan_both = torch.isnan(a) & torch.isnan(e)
        # an infinity only matches itself (its allowance would be infinite); a NaN diff is bad
        close = torch.isfinite(e.to(work)) & (diff <= allowed)
        bad = ~((a.to(work) == e.to(work)) | nan_both | close)
    else:
        allowed = torch.zeros_like(diff)
        bad = a != e
    print(f"{path}: actual stride {list(a.stride())}, expected stride {list(e.stride())}")
    show(path, a, e, diff, allowed, bad)
    return not bool(bad.any())


def same_bits(a, b):
    """Elementwise: the same bytes (so NaN payloads and signed zeros count)."""
    a = a.detach().cpu().contiguous().reshape(-1)
    b = b.detach().cpu().to(a.dtype).contiguous().reshape(-1)
    if a.dtype == torch.bool or a.numel() == 0:
        return (a == b).reshape(a.shape)
    size = a.element_size()
    return (a.view(torch.uint8).reshape(-1, size) == b.view(torch.uint8).reshape(-1, size)).all(-1)


def show(path, a, e, diff, allowed, bad):
    """The mismatch count, the largest difference, and a few elements around the worst one."""
    n = a.numel()
    print(f"{path}: {int(bad.sum())} of {n} element(s) differ (dtype {a.dtype}, shape {list(a.shape)})")
    if not bool(bad.any()):
        return
    diff = torch.nan_to_num(diff.reshape(-1), nan=float("inf"))
    excess = torch.where(bad.reshape(-1), diff - allowed.reshape(-1), torch.tensor(-float("inf"), dtype=diff.dtype))
    worst = int(excess.argmax())
    print(f"  max |actual - expected| = {float(diff.max()):.6g}; at the worst element, "
          f"{float(diff[worst]):.6g} against {float(allowed.reshape(-1)[worst]):.6g} allowed (ATOL + RTOL * |expected|)")
    print(f"  {'index':<18}{'actual':>16}{'expected':>16}{'|diff|':>14}")
    for i in range(max(0, worst - 2), min(n, worst + 3)):
        index = [int(j) for j in torch.unravel_index(torch.tensor(i), a.shape)] if a.dim() else []
        mark = "  <- worst" if i == worst else ("  <- differs" if bool(bad.reshape(-1)[i]) else "")
        print(f"  {index!s:<18}{fmt(a.reshape(-1)[i]):>16}{fmt(e.reshape(-1)[i]):>16}{float(diff[i]):>14.4g}{mark}")


def fmt(x):
    """One element, as ``show`` prints it."""
    value = x.item()
    if isinstance(value, complex):
        return f"{value.real:.6g}{value.imag:+.6g}j"
    return f"{value:.7g}" if isinstance(value, float) else str(value)


def describe(T):
    """Each argument's layout, one line each."""
    for path, t in T.items():
        print(f"  {path}: shape {list(t.shape)}, stride {list(t.stride())}, offset {t.storage_offset()}, "
              f"{t.dtype} on {t.device}{', requires_grad' if t.requires_grad else ''}")


def storage_bytes(t):
    """The bytes of every element of ``t``'s whole storage, one row an element."""
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))
    return flat.detach().cpu().clone().view(torch.uint8).reshape(n, t.element_size())


def view_mask(numel, shape, stride, offset):
    """Which storage elements the view covers."""
    mask = torch.zeros(numel, dtype=torch.bool)
    if all(s > 0 for s in shape):
        mask[torch.arange(numel).as_strided(shape, stride, offset).reshape(-1)] = True
    return mask


def load_imports():
    """The modules the sweep imported first (custom kernels): a .py file or a module name."""
    for name in IMPORTS:
        if name.endswith(".py"):
            GLOBALS.append(runpy.run_path(name, run_name="__torchsleuth_import__"))
        else:
            importlib.import_module(name)


# --- copying them ---------------------------------------------------------------------------

_STATE = ("GLOBALS",)  # module-level values a helper needs: copied with it
_TOOLS = ("source", "imports")  # the kit's own functions, never copied


def _copyable() -> dict[str, object]:
    """The helpers and state ``source`` can copy, by name, in the order they are defined here."""
    module = sys.modules[__name__]
    found: dict[str, object] = {}
    for name, value in vars(module).items():
        if isinstance(value, types.FunctionType) and value.__module__ == __name__ and not name.startswith("_") and name not in _TOOLS:
            found[name] = value
    found.update((name, getattr(module, name)) for name in _STATE)
    return found


# The kit's source does not change while a process runs: each helper's text and names are read once. A whole-catalog
# report writes a script per finding, each copying tens of helpers: parsed again for each, they took most of the 26 s a
# GPU sweep's report took (bench/cuda-sweep.md, run P).
@functools.lru_cache(maxsize=None)
def _text(name: str) -> str:
    """The source of one helper, or the line(s) assigning one piece of state."""
    value = _copyable()[name]
    if isinstance(value, types.FunctionType):
        return inspect.getsource(value).rstrip("\n")
    lines = inspect.getsource(sys.modules[__name__]).splitlines()
    for node in ast.parse("\n".join(lines)).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return "\n".join(lines[node.lineno - 1:node.end_lineno])
    raise LookupError(f"no assignment of {name} in {__name__}")


@functools.lru_cache(maxsize=None)
def _names_used(name: str) -> frozenset[str]:
    """Every global name a helper's code reads (its own locals included: harmless extra)."""
    return frozenset(node.id for node in ast.walk(ast.parse(_text(name))) if isinstance(node, ast.Name))


@functools.lru_cache(maxsize=None)
def _closure(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` and every helper or state they reach, depth first, each once."""
    known = _copyable()
    ordered: list[str] = []

    def visit(name: str) -> None:
        if name in ordered:
            return
        if name not in known:
            raise KeyError(f"the repro kit has no helper {name!r}; it has {', '.join(known)}")
        ordered.append(name)
        for used in sorted(_names_used(name) & set(known)):
            visit(used)

    for name in names:
        visit(name)
    return tuple(ordered)


def source(*names: str) -> str:
    """The helpers ``names``, with what they use of the kit, as script source (two blank lines apart)."""
    return "\n\n\n".join(_text(name) for name in _closure(names)) + "\n"


def imports(*names: str) -> tuple[str, ...]:
    """The modules the copied helpers need, sorted: a script imports them (and torch)."""
    modules = {name for name, value in vars(sys.modules[__name__]).items() if isinstance(value, types.ModuleType)}
    used = set().union(*(_names_used(name) for name in _closure(names))) if names else set()
    return tuple(sorted((used & modules) - {"torch"}))
