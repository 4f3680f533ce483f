"""The optimizer runs themselves, in code that needs only torch: it is copied into every repro script.

Design note. Everything a run does (which parameters, their values, their
memory layout, the gradients of each step, the steps, what is recorded, how
far a result may stray) lives here, in one module that imports nothing but
torch and the standard library. A repro script carries this module's source
verbatim, so the script rebuilds exactly the tensors the sweep built and
judges them by exactly the same rule; nothing can drift between the two.

Values. Initial parameters are ``0.1 * randn`` (a typical initialisation
scale). Gradients are ``±U[0.5, 2)``: magnitudes in one band, so that in
every dtype of the matrix their squares (Adam's second moment, Adagrad's sum)
are normal numbers. The precision reference then measures rounding, which is
what a kernel controls, not float16's underflow of ``g**2`` to zero, which
no kernel can avoid (PyTorch's float16 Adam with ``eps=1e-8`` divides by
zero there, by design of the dtype). Values are drawn in float64 from
generators seeded by (seed, what, step, parameter) and rounded to the dtype
under test; a float64 reference run starts from those rounded values, so
only the optimizer's own arithmetic differs.

Optimizers whose ``step`` needs a closure (LBFGS) get one that writes the
step's seeded gradient into ``p.grad`` and returns the linear loss
``sum(g * p)`` whose gradient it is (matrix.py gives LBFGS ``max_iter=1``,
so that it takes one gradient per step as every other optimizer does).
Gradients are laid out as autograd lays them out: like the parameter when it
is dense (``empty_like``), contiguous when it has gaps.

Poison. Every parameter lives in a storage of its own filled with
``SENTINEL`` first: the gaps of a sliced parameter and ``GUARD`` elements
after every view keep it. A kernel that reads them puts a wild value into
its result; one that writes them changes them (``out_of_view``). A finite
sentinel rather than NaN, because a kernel that reads NaN from a gap and
writes the NaN it computed back leaves NaN there: the write would not show.

Emulated rounding. How far rounding to a dtype can carry a run is measured,
not only bounded: ``Rounded`` runs the float64 reference with every float64
tensor an op produces rounded to the dtype under test (and kept in float64),
which is what a correct kernel in that dtype does to each result it stores.
Its distance from the exact float64 run, ``k``, covers what a bound in units
of roundoff misses: values in the subnormal range (Adadelta's ``eps=1e-6``
is a subnormal float16), a constant the dtype cannot hold, updates smaller
than half a unit in the last place of their parameter. The same run notes
the lowest floating precision any op worked in (Muon orthogonalizes in
bfloat16 whatever the parameters' dtype).

Hyperparameters. A hyperparameter given as a 0-dim tensor (torch documents
``lr`` and ``betas`` so) is written ``AsTensor(value)`` in the keyword
arguments, a plain value a script can print; each run makes the tensor anew
(``torch.tensor(value)``: float32, on the CPU, as a user writes it).

Contracts. ``unkept`` says what breaks "no parameter moves, bit for bit, and
the state stays finite", which a step with lr=0 and a step with a zero
gradient (``zero=True``) promise where the math does (optim/contracts.py
says where).

Recorded per tensor (each parameter and each tensor of its optimizer state,
named ``weight`` and ``weight.exp_avg``): its final value, the largest
magnitude each element had over the run (``largest``), and the sum over
steps of how far each element moved (``path``). The allowance rule uses both
(see ``allowance``).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# The parameters every configuration optimizes: a 2-D weight, a 1-D bias and
# a 4-D convolution weight (the one channels_last re-lays out). Sizes above a
# vector register's width, so vectorized and scalar loops both run.
PARAMS = (("weight", (12, 20)), ("bias", (20,)), ("conv", (8, 3, 3, 3)))
LAYOUTS = ("contiguous", "transposed", "sliced", "channels_last")
# Elements of poison after every parameter's view (the gaps of a sliced one
# hold it too), and the poison: exact in every floating dtype, and far from
# any value a parameter takes.
GUARD = 4
SENTINEL = 1000.0


@dataclass(frozen=True, slots=True)
class AsTensor:
    """A hyperparameter given as a 0-dim tensor of ``value``."""

    value: float


def materialize(arguments: dict) -> dict:
    """The constructor's keyword arguments with every ``AsTensor`` made a tensor (in tuples too)."""

    def made(value):
        if isinstance(value, AsTensor):
            return torch.tensor(value.value)
        if isinstance(value, tuple):
            return tuple(made(item) for item in value)
        return value

    return {key: made(value) for key, value in arguments.items()}


def generator(seed: int, *salt: int) -> torch.Generator:
    """A CPU generator for one draw: (seed, what, step, parameter) map to distinct streams."""
    mixed = seed
    for part in salt:
        mixed = (mixed * 1_000_003 + part + 1) % (2**61 - 1)
    return torch.Generator().manual_seed(mixed)


@functools.lru_cache(maxsize=256)  # every configuration draws the same few; callers never write into them
def initial(seed: int, index: int, shape) -> torch.Tensor:
    return 0.1 * torch.randn(shape, generator=generator(seed, 0, index), dtype=torch.float64)


@functools.lru_cache(maxsize=1024)
def gradient(seed: int, step: int, index: int, shape) -> torch.Tensor:
    g = generator(seed, 1, step, index)
    magnitude = 0.5 + 1.5 * torch.rand(shape, generator=g, dtype=torch.float64)
    sign = torch.randint(0, 2, shape, generator=g, dtype=torch.int64) * 2 - 1
    return sign * magnitude


def _contiguous_strides(shape) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return list(reversed(strides))


def strides_of(shape, layout: str) -> list[int]:
    """The strides a parameter of ``shape`` gets in ``layout`` (contiguous where the layout does not apply)."""
    shape = list(shape)
    if layout == "transposed" and len(shape) >= 2:
        swapped = shape[:-2] + [shape[-1], shape[-2]]
        strides = _contiguous_strides(swapped)
        return strides[:-2] + [strides[-1], strides[-2]]
    if layout == "sliced" and shape:
        # every other element of a buffer twice as wide in the last dim: gaps between elements
        strides = _contiguous_strides(shape[:-1] + [2 * shape[-1]])
        return strides[:-1] + [2]
    if layout == "channels_last" and len(shape) == 4:
        n, c, h, w = shape
        return [h * w * c, 1, w * c, c]
    return _contiguous_strides(shape)


def lay_out(values: torch.Tensor, layout: str, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``values`` in ``dtype`` on ``device``, laid out in ``layout``: (the view, its whole storage)."""
    shape = list(values.shape)
    strides = strides_of(shape, layout)
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if values.numel() else 0
    storage = torch.full((extent + GUARD,), SENTINEL, dtype=dtype, device=device)
    view = storage.as_strided(shape, strides, 0)
    view.copy_(values.to(dtype))
    return view, storage


def out_of_view(view: torch.Tensor, storage: torch.Tensor) -> int:
    """How many poison elements around ``view`` in ``storage`` changed: writes outside the view."""
    index = torch.arange(storage.numel(), device=storage.device).as_strided(view.shape, view.stride(), view.storage_offset())
    outside = torch.ones(storage.numel(), dtype=torch.bool, device=storage.device)
    outside[index.reshape(-1)] = False
    return int((storage[outside] != SENTINEL).sum())


def gradient_like(param: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A gradient laid out as autograd lays one out: like ``param`` when it is dense, else contiguous."""
    return torch.empty_like(param).copy_(values)


@dataclass(frozen=True, kw_only=True, slots=True)
class Trajectory:
    """What one run left: per tensor path, its final value and what the allowance rule needs."""

    final: dict  # path -> tensor on the CPU, in the dtype it had
    largest: dict  # path -> float64: each element's largest magnitude over the run
    path: dict  # path -> float64: the sum over steps of each element's movement
    initial: dict  # parameter name -> its starting values (float64)
    layouts: dict  # parameter name -> (shape, stride, storage offset, storage elements)
    outside: dict  # parameter name -> poison elements written outside its view
    params: tuple  # the parameter names, in order


def state_tensors(name: str, state: dict) -> dict:
    """The tensors of one parameter's optimizer state by path (``weight.exp_avg``, ``weight.old_dirs[2]``)."""
    found = {}
    for key in sorted(state, key=str):
        value = state[key]
        if isinstance(value, torch.Tensor):
            found[f"{name}.{key}"] = value
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    found[f"{name}.{key}[{i}]"] = item
    return found


def trajectory(
    optimizer,
    kwargs: dict,
    *,
    layout: str,
    dtype: torch.dtype,
    device,
    steps: int,
    seed: int,
    values_dtype: torch.dtype | None = None,
    names=None,
    closure: bool = False,
    mode: TorchDispatchMode | None = None,
    zero: bool = False,
) -> Trajectory:
    """Run ``optimizer(params, **kwargs)`` for ``steps`` steps and record what it did.

    ``values_dtype``: the dtype initial values and gradients are rounded to
    (the dtype under test, for a float64 reference of it); ``names``: the
    parameters to optimize (all of ``PARAMS`` by default); ``closure``: pass
    ``step`` a closure that sets the gradients, instead of setting them first;
    ``zero``: every gradient zero.
    """
    values_dtype = values_dtype or dtype
    chosen = [(i, name, shape) for i, (name, shape) in enumerate(PARAMS) if names is None or name in names]
    params, storages, start = {}, {}, {}
    for index, name, shape in chosen:
        values = initial(seed, index, shape).to(values_dtype).to(torch.float64)
        params[name], storages[name] = lay_out(values, layout, dtype, device)
        start[name] = values
    opt = optimizer(list(params.values()), **materialize(kwargs))

    grads = {}

    def loss():
        # the step's seeded gradient, as the gradient of the linear loss sum(g * p)
        total = 0.0
        for name, p in params.items():
            p.grad = gradient_like(p, grads[name])
            total = total + (grads[name] * p.detach()).sum()
        return total

    largest, path, last = {}, {}, {}

    def record():
        now = {}
        for name, p in params.items():
            now[name] = p
            now.update(state_tensors(name, opt.state.get(p, {})))
        for key, tensor in now.items():
            value = tensor.detach().to("cpu", torch.float64)
            if key in last and last[key].shape == value.shape:
                path[key] = path[key] + (value - last[key]).abs()
                largest[key] = torch.maximum(largest[key], value.abs())
            else:  # new (state appears at the first step) or reshaped (LBFGS history): start its record here
                path[key] = torch.zeros_like(value)
                largest[key] = value.abs()
            last[key] = value
        return now

    now = record()
    for step in range(steps):
        for index, name, shape in chosen:
            drawn = torch.zeros(shape, dtype=torch.float64) if zero else gradient(seed, step, index, shape)
            grads[name] = drawn.to(values_dtype).to(dtype).to(device)
            if not closure:
                params[name].grad = gradient_like(params[name], grads[name])
        with mode if mode is not None else contextlib.nullcontext():
            if closure:
                opt.step(loss)
            else:
                opt.step()
        now = record()
    final = {key: tensor.detach().to("cpu").clone() for key, tensor in now.items()}
    return Trajectory(
        final=final,
        largest={key: largest[key] for key in final},
        path={key: path[key] for key in final},
        initial=start,
        layouts={name: (tuple(p.shape), tuple(p.stride()), p.storage_offset(), storages[name].numel()) for name, p in params.items()},
        outside={name: out_of_view(p, storages[name]) for name, p in params.items()},
        params=tuple(params),
    )


def unkept(run: Trajectory, *, finite=None) -> list[str]:
    """What in ``run`` breaks "no parameter moves, bit for bit, and the state stays finite": a line per tensor.

    ``finite``: path -> where (a bool tensor) the math keeps that state
    tensor finite, the state tensors it does not name not judged; None: every
    state tensor must be finite everywhere.
    """
    broken = []
    for name in run.params:
        final = run.final[name]
        start = run.initial[name].to(final.dtype)
        changed = _bits(final) != _bits(start)
        if bool(changed.any()):
            moved = (final.to(torch.float64) - run.initial[name]).abs()[changed]
            broken.append(f"{name} moved: {int(changed.sum())} of {final.numel()} elements changed "
                          f"(by up to {float(moved.nan_to_num(nan=float('inf')).max()):.3g}; expected its initial value, bit for bit)")
    for path, value in run.final.items():
        if path in run.params or not value.is_floating_point():
            continue
        bad = ~torch.isfinite(value)
        if finite is not None and path in finite:
            bad &= finite[path]
        elif finite is not None:
            continue  # no word on where the math keeps it finite: not judged
        if bool(bad.any()):
            broken.append(f"{path} is not finite: {int(bad.sum())} of {value.numel()} elements NaN or infinite")
    return broken


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a floating tensor (NaN payloads and signed zeros told apart)."""
    return tensor.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


class Rounded(TorchDispatchMode):
    """Every float64 tensor an op writes, rounded to ``dtype`` (see the design note); notes the lowest precision seen."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype
        self.lowest = torch.float64

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        written = list(_tensors(out))
        for argument, value in zip(func._schema.arguments, list(args) + [kwargs.get(a.name) for a in func._schema.arguments[len(args):]]):
            if argument.alias_info is not None and argument.alias_info.is_write:
                written += list(_tensors(value))
        for t in written:
            if t.dtype == torch.float64:
                t.copy_(t.to(self.dtype))
            elif t.dtype.is_floating_point and t.numel() > 1 and torch.finfo(t.dtype).eps > torch.finfo(self.lowest).eps:
                self.lowest = t.dtype
        return out


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def allowance(expected, largest, path, *, atol: float, rtol: float, u: float, steps: int, factor: float, slack: float, k=0.0) -> torch.Tensor:
    """How far each element of a result may be from ``expected`` after ``steps`` steps (float64).

        allowed = atol + rtol*|expected| + factor * (k + u * (2*steps*largest + slack*steps*path))

    ``u`` is the unit roundoff of the precision the run computes at. Each step
    rounds the stored value once (up to one unit in the last place, 2u of the
    largest value it had, when two correct implementations round to different
    neighbours) and computes its update through a few roundings of
    intermediates (``slack`` units of the update's size); rounding errors in
    the optimizer's state carry into every later update, hence ``steps``
    times the summed movement ``path``. ``factor``: 2 when both sides are
    rounded (same-dtype comparisons), the precision margin against float64.
    ``k``: how far emulated rounding to the dtype carried the float64 run
    (``Rounded``), for what the bound in units of roundoff does not model;
    where that run is not finite, the dtype cannot hold the computation at
    all and the element is not judged (its allowance is infinite). ``k`` is
    one sample of how rounding propagates, and where an update mixes every
    element (Muon's Newton-Schulz matmuls) a sample can be small at one
    element by chance while the error there is as large as anywhere: each
    element's ``k`` is floored at the mean of the tensor's finite ``k``.
    """
    expected = expected.to(torch.float64)
    if isinstance(k, torch.Tensor):
        k = torch.nan_to_num(k, nan=float("inf"), posinf=float("inf"))
        finite = k[torch.isfinite(k)]
        if finite.numel():  # floored at its mean: see above
            k = torch.maximum(k, finite.mean())
    allowed = atol + rtol * expected.abs() + factor * (k + u * (2 * steps * largest + slack * steps * path))
    # not judged where the dtype cannot hold the computation, whatever the reference holds there (NaN, an infinity)
    return torch.where(torch.isinf(torch.as_tensor(k)), float("inf"), allowed)


def beyond(actual: torch.Tensor, expected: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The elements of ``actual`` not within ``allowed`` of ``expected``.

    NaN must meet NaN and an infinity the same infinity, except where the
    allowance is infinite (an element not judged).
    """
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    same = (a == e) | (torch.isnan(a) & torch.isnan(e)) | torch.isinf(allowed)
    close = (a - e).abs() <= torch.where(torch.isfinite(e), allowed, torch.zeros_like(allowed))
    return ~same & ~close
