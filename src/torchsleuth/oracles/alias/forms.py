"""The aliasings the ``alias`` oracle makes: which forms a call allows, and the aliased call itself.

Design note. Pure construction, nothing judged here (oracle.py judges).
A ``Form`` names one aliasing of one call: the written tensor (self, or an
out= path) and the read one that shares its memory; its oracle name
``alias:<form>:<written>=<read>`` replays it. ``applicable`` says which
forms a call's input and output shapes allow; ``aliased`` builds the call
with the aliasing from a sample (afresh, so it can be made twice), and
``unaliased`` makes the same variant on unaliased copies, for blame.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from ...cases import layouts
from ...judge.context import changed
from ...run import call, tree

# How each form reads after the op's name; {written} and {read} are argument paths.
FORMS = {
    "shared-out": "one tensor passed for both {written} and {read}",
    "out-is-input": "{written} the same tensor as {read}",
    "out-overlaps-input": "{written} starting at the second element of {read} (partial overlap)",
    "inplace-other-is-self": "{read} the same tensor as self",
    "inplace-other-views-self": "{read} a view of self's storage starting one element before self",
    "inplace-other-transposes-self": "{read} the transpose of self (a view of it)",
}
# Forms where both paths are one tensor (the others are two views of one storage).
SAME_TENSOR = frozenset({"shared-out", "out-is-input", "inplace-other-is-self"})

Meta = tuple[tuple[int, ...], torch.dtype]


@dataclass(frozen=True, kw_only=True, slots=True)
class Form:
    """One aliasing of one call: ``written`` (self, or an out= path) and ``read`` share memory."""

    name: str  # a key of FORMS
    written: str
    read: str

    @property
    def oracle(self) -> str:
        return f"alias:{self.name}:{self.written}={self.read}"

    @classmethod
    def parse(cls, oracle: str) -> "Form":
        family, name, pair = oracle.split(":", 2)
        written, read = pair.split("=", 1)
        if family != "alias" or name not in FORMS:
            raise ValueError(f"not an alias oracle: {oracle!r}")
        return cls(name=name, written=written, read=read)

    def words(self) -> str:
        return FORMS[self.name].format(written=self.written, read=self.read)


# --- which forms apply ------------------------------------------------------------------


def applicable(variant: str, inputs: dict[str, Meta], outputs: dict[str, Meta]) -> list[Form]:
    """The forms possible for a call with these input and output tensors (shape, dtype)."""
    found: list[Form] = []
    if variant == "inplace" and "input" in inputs:
        shape, dtype = inputs["input"]
        n = math.prod(shape)
        for path, (other, other_dtype) in inputs.items():
            if path == "input" or path.startswith("input[") or other_dtype != dtype or not n or not math.prod(other):
                continue
            if other == shape:
                found.append(Form(name="inplace-other-is-self", written="input", read=path))
            if math.prod(other) >= 2:
                found.append(Form(name="inplace-other-views-self", written="input", read=path))
            if other == shape and len(shape) >= 2 and shape[-1] == shape[-2] > 1:
                found.append(Form(name="inplace-other-transposes-self", written="input", read=path))
    elif variant == "out":
        paths = [p for p, (s, _) in outputs.items() if math.prod(s)]
        pair = next(((a, b) for i, a in enumerate(paths) for b in paths[i + 1:] if outputs[a] == outputs[b]), None)
        if pair:
            found.append(Form(name="shared-out", written=pair[0], read=pair[1]))
        for path, (shape, dtype) in inputs.items():
            if not math.prod(shape):
                continue
            same = next((q for q in paths if outputs[q] == (shape, dtype)), None)
            if same:
                found.append(Form(name="out-is-input", written=same, read=path))
            overlapping = next((q for q in paths if outputs[q][1] == dtype), None)
            if overlapping and math.prod(shape) >= 2:
                found.append(Form(name="out-overlaps-input", written=overlapping, read=path))
    return found


def metas(tensors: dict[str, Any]) -> dict[str, Meta] | None:
    if not all(isinstance(t, torch.Tensor) and t.layout == torch.strided for t in tensors.values()):
        return None
    return {p: (tuple(t.shape), t.dtype) for p, t in tensors.items()}


# --- making the aliased call --------------------------------------------------------------


@dataclass
class Aliased:
    """The aliased tensors of one call, and the call (live tensors; stays in the worker)."""

    prepared: call.Prepared
    written: tuple[str, ...]  # paths the call writes by contract
    layouts: dict[str, str]  # path -> how it aliases, for the findings file ("view of input", ...)
    outs: dict[str, Meta]  # out= paths and what each must hold (shape, dtype)


def _fresh(shape, dtype, device) -> torch.Tensor:
    """A contiguous tensor in a storage of its own, poisoned, with guards after it."""
    return layouts.apply("contiguous", torch.full(shape, layouts.poison(dtype), dtype=dtype, device=device))


def _shifted_pair(read: torch.Tensor, written: torch.Tensor, *, keep_written: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``read`` at offset 0 and ``written`` at offset 1 of one poisoned storage (guards after both).

    Where they overlap the storage holds ``written``'s values if
    ``keep_written`` (an in-place self: its values are an input too), else
    ``read``'s (an out= tensor's values are never read).
    """
    n_read, n_written = read.numel(), written.numel()
    storage = torch.full((max(n_read, 1 + n_written) + layouts.GUARD,), layouts.poison(read.dtype), dtype=read.dtype, device=read.device)
    storage[1:1 + n_written].copy_(written.reshape(-1))
    storage[:n_read].copy_(read.reshape(-1))
    if keep_written:
        storage[1:1 + n_written].copy_(written.reshape(-1))
    view = lambda t, offset: storage.as_strided(tuple(t.shape), layouts.contiguous_strides(t.shape), offset).detach()  # noqa: E731
    return view(read, 0), view(written, 1)


def plain(value: Any) -> Any:
    """``value`` with every tuple subclass (torch.return_types) made a plain tuple, as out= takes it."""
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return tuple(plain(v) for v in value)
    return value


def aliased(form: Form, subject, expected: Any) -> Aliased:
    """The call of ``subject``'s case with ``form``'s aliasing, built afresh (so it can be made twice)."""
    case = subject.case
    args, kwargs = call.sample_call(subject.sample, case.device)
    inputs = {p: layouts.apply("contiguous", t.detach()) for p, t in tree.call_leaves(args, kwargs).items()}
    tensors = dict(inputs)
    how: dict[str, str] = {}
    templates: dict[str, Meta] = {}
    if case.variant == "inplace":
        written = ("input",)
        self_, other = tensors["input"], tensors[form.read]
        if form.name == "inplace-other-is-self":
            tensors[form.read] = self_
            how[form.read] = "self itself"
        elif form.name == "inplace-other-views-self":
            tensors[form.read], tensors["input"] = _shifted_pair(other, self_, keep_written=True)
            how[form.read] = "view of self's storage, one element before self"
        else:
            tensors[form.read] = self_.transpose(-1, -2)
            how[form.read] = "transpose of self"
        inputs = {p: tensors[p] for p in inputs}
    else:
        templates = {p: (tuple(v.shape), v.dtype) for p, v in tree.output_leaves(expected)}
        outs = {p: _fresh(shape, dtype, case.device) for p, (shape, dtype) in templates.items()}
        written = tuple(outs)
        if form.name == "shared-out":
            outs[form.read] = outs[form.written]
            how[form.read] = f"the same tensor as {form.written}"
        elif form.name == "out-is-input":
            outs[form.written] = tensors[form.read]
            how[form.written] = f"the same tensor as {form.read}"
        else:
            tensors[form.read], outs[form.written] = _shifted_pair(tensors[form.read], outs[form.written], keep_written=False)
            how[form.written] = f"view of {form.read}'s storage from its second element on"
        inputs = {p: tensors[p] for p in inputs}
        tensors = {**inputs, **outs}
        kwargs = dict(kwargs, out=tree.replace(plain(expected), "out", outs))
    args, kwargs = tree.replace_call(args, kwargs, inputs)
    prepared = call.Prepared(case=case, function=subject.function, args=args, kwargs=kwargs, tensors=tensors,
                             written=frozenset(written), process=subject.sample.output_process_fn_grad)
    return Aliased(prepared=prepared, written=written, layouts=how, outs=templates)


def unaliased(made: Aliased, values: dict[str, torch.Tensor]) -> tuple[Aliased, dict, dict, frozenset[str]]:
    """The same variant made on unaliased copies of ``values`` (fresh out= tensors).

    Returns the call as made (its tensors the copies, written), the written
    storages' snapshot and metadata from before it, and the inputs the call
    changed besides (batch norm's running statistics: written by contract).
    """
    copies = {p: layouts.apply("contiguous", v) for p, v in values.items()}
    copies.update({p: _fresh(shape, dtype, made.prepared.case.device) for p, (shape, dtype) in made.outs.items()})
    plain = dataclasses.replace(made, prepared=dataclasses.replace(made.prepared, tensors=copies))
    written = {p: copies[p] for p in made.written}
    before, meta = call.snapshot(written), {p: call.metadata(t) for p, t in written.items()}
    inputs = {p: copies[p] for p in values if p not in made.written}
    kept = call.snapshot(inputs)
    call.compute(plain.prepared, copies)
    call.synchronize(made.prepared.case.device)
    changed_inputs = frozenset(p for p, t in inputs.items() if bool(changed(kept[p], call.storage_of(t)).any()))
    return plain, before, meta, changed_inputs
