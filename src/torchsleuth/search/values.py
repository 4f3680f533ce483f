"""The ``values`` search: special values in the vector body and the scalar tail of a sample's tensors.

Design note. The edit ``special:PATH=SET`` (or ``special:PATH=SET@K``)
replaces the values of the sample's tensor ``PATH`` with the special set
``SET`` for its dtype (``value_sets``: ``nonfinite``, ``extreme``,
``overflow``, ``rounding``; ``int``, ``wide``; ``bool``), laid out as a
cycle in row-major order: element ``j`` holds value ``(j + K) % L``. A set
holds at most 7 values and the cycle is made odd (a set of even length
repeats its first value), so it is coprime with every vector width: each
lane of a vector meets every value, and any 7 consecutive elements hold the
whole set. Complex tensors take the set in both parts, the imaginary part
``IMAGINARY_SHIFT`` values ahead (``(nan, 0)``, ``(inf, -0)``, ...).

Where the values sit. A CPU kernel handles ``W = 2 * Vec::size()``
elements a step (8 for float64 with AVX2 up to 128 for int8 with AVX-512,
all powers of two) and the rest in a scalar tail of ``n % W`` elements. A
length ``n = 127 (mod 128)`` leaves a tail of ``W - 1 >= 7`` elements for
every such ``W``, so the whole set sits in the tail and, from 255 elements
on, in the body as well. The planner therefore grows (or narrows) the
innermost dim with the ``dim:PATH@D>K`` edit before the value edits, where
that keeps the call valid:

* pointwise ops: every dimensioned tensor whose innermost dim is the
  broadcast shape's, to the length that brings the broadcast element count
  nearest to ``-1 (mod 128)`` from 255 elements on (TensorIterator walks a
  contiguous pointwise call as one flat loop); 0-dim tensors are kept, as
  ``run.lengths`` keeps them (type promotion);
* reductions with one dimensioned tensor: its innermost dim to 255, so each
  row (reduced along it, or vectorised across it) has a body and a full
  tail;
* other ops: the sample's own shapes (growing one tensor of a matrix product
  would break it).

Which tensors. Tensors of the case's dtype only: a float op's integer
tensors are indices, sizes or masks. Integer and bool tensors are edited
only for pointwise ops and reductions, whose integer arguments are values
(``gather``'s index is neither). Random ops get nothing: their values are
draws.

The plan, per sample and variant (functional, backward, in-place; the
method and out= variants reach the functional kernels, and an out= case of
an op whose result is not a tensor cannot be made): one case per set, each
edited tensor rotated by its position (``input`` at 0, ``args[0]`` at 1, ...)
so that two operands pair different values (``extreme`` rotated by one
pairs each huge value with a tiny one, both ways: huge/tiny and tiny/huge);
and with several tensors one more, ``extreme`` against ``nonfinite``.

Which sets, by what the precision reference can judge fairly (float64's
result rounded to the dtype: it has no intermediates in the dtype, so a
call that overflows on the way where float64 does not differs from it):

* pointwise ops, forward: every set;
* reductions, forward: not ``extreme``: a sum of huge values of both signs
  meets ``max + max`` or not depending on its order;
* backward of either: ``nonfinite`` (and the integer and bool sets), whose
  values are exact in every precision: a gradient formula multiplies
  forward values that overflow in the dtype (exp's result at 89 in
  float32, 2**129 in bfloat16) by output gradients below 1, which float64
  keeps finite;
* any other op (matrix products, linear algebra, convolutions, sampling),
  forward only: ``nonfinite``. Wide-ranging or nearly equal values make
  matrices ill-conditioned beyond what the tolerance rule measures, and
  their gradients spread a NaN or an infinity by algorithm (zero-inserting
  transposed convolutions in bfloat16 make 0 * inf);
* complex dtypes: ``rounding`` and ``overflow``, forward, pointwise and
  reductions only (``COMPLEX_SETS``).
"""

from __future__ import annotations

import functools
import math

import torch

from ..cases import opinfo
from ..errors import UsageError
from ..run import opclass, tree
from . import value_sets
from .registry import Search

DESCRIPTION = ("special values (NaN, +-inf, +-0, subnormals, the largest values, overflow thresholds of exp/sinh/cosh, rounding ties, "
               "integer extremes) in the vector body and the scalar tail of each argument")
VERB = "special"
FORM = "special:PATH=SET[@K]"

VARIANTS = ("functional", "backward", "inplace")
# The widest CPU step (two 64-byte vectors of int8): a length of -1 modulo it
# leaves a tail of W - 1 for every narrower power-of-two step W too.
STEP = 128
SHORTEST = 2 * STEP - 1  # a body of at least one step of every width, and a full tail
LONGEST = 1 << 15  # no growth past this many elements: the search stays cheap
# Sets judged fairly in any op: their values are exact in every precision.
ANY_OP = frozenset({"nonfinite", "int", "bool"})
# Complex values with an infinite part have no one right form ((inf+nanj) and (inf-infj) are both
# complex infinity, and which one comes out depends on how the kernel multiplies): only finite sets.
COMPLEX_SETS = frozenset({"rounding", "overflow"})
IMAGINARY_SHIFT = 3  # coprime with a set's length, so the parts pair different values


def special(path: str, name: str, rotation: int = 0) -> str:
    """The edit giving tensor ``path`` the values of set ``name``, rotated by ``rotation``."""
    return f"{VERB}:{path}={name}" + (f"@{rotation}" if rotation else "")


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """One case per special set of ``dtype`` (and a cross case for several tensors), each after the growth edits."""
    if variant not in VARIANTS:
        return []
    kind = op_kind(op)
    if kind == "random":
        return []
    wanted = getattr(torch, dtype)
    tensors = tree.sample_tensors(sample)
    targets = [path for path, t in tensors.items() if _eligible(t, wanted, kind)]
    if not targets:
        return []
    grown = growth(kind, tensors)
    names = [name for name in value_sets.names(wanted) if _fits(name, kind, variant, wanted)]
    planned = [(*grown, *(special(path, name, i) for i, path in enumerate(targets))) for name in names]
    if len(targets) > 1 and "extreme" in names:
        first, *others = targets
        planned.append((*grown, special(first, "extreme"), *(special(path, "nonfinite", i) for i, path in enumerate(others, 1))))
    return planned


def apply(sample, rest: str, *, op: str = ""):
    """``sample`` with the edit ``special:REST`` made: tensor PATH holds the set's values in a cycle."""
    target, name, rotation, found = read_edit(VERB, rest, sample)
    allowed = value_sets.names(found[target].dtype)
    if name not in allowed:
        raise UsageError(f"unknown special set {name!r} for a {found[target].dtype} tensor in special:{rest}; allowed: {', '.join(allowed)}")
    return tree.map_sample_tensors(sample, lambda path, t: filled(t, name, rotation) if path == target else t)


def read_edit(verb: str, rest: str, sample) -> tuple[str, str, int, dict]:
    """``PATH=SET[@K]`` of the edit ``VERB:REST`` read: the path (a tensor of ``sample``), the set's name, the
    rotation, and the sample's tensors by path."""
    target, _, chosen = rest.rpartition("=")
    name, _, rotation = chosen.partition("@")
    found = tree.sample_tensors(sample)
    if target not in found:
        raise UsageError(f"no tensor {target!r} in the sample for {verb}:{rest}; its tensors: {', '.join(found) or 'none'}")
    if rotation and not rotation.isdigit():
        raise UsageError(f"the rotation in {verb}:{rest} must be a whole number ({verb}:PATH=SET@K)")
    return target, name, int(rotation or 0), found


def filled(t: torch.Tensor, name: str, rotation: int = 0) -> torch.Tensor:
    """A fresh contiguous tensor of ``t``'s shape and dtype holding set ``name`` as a cycle from ``rotation``."""
    return cycle(t, value_sets.values(name, t.dtype), rotation)


def cycle(t: torch.Tensor, values, rotation: int = 0) -> torch.Tensor:
    """A fresh contiguous tensor of ``t``'s shape and dtype holding ``values`` (at most value_sets.MAX_SET, each held
    by the dtype) as an odd cycle from ``rotation``: the placement every value search shares."""
    values = list(values)
    if len(values) % 2 == 0:
        values.append(values[0])  # an odd cycle: coprime with every vector width
    index = (torch.arange(t.numel()) + rotation) % len(values)
    if t.is_complex():
        table = torch.tensor(values, dtype=torch.float64)
        flat = torch.complex(table[index], table[(index + IMAGINARY_SHIFT) % len(values)])
    else:
        table = torch.tensor(values, dtype=torch.float64 if t.is_floating_point() else torch.int64)
        flat = table[index]
    return flat.to(t.dtype).reshape(t.shape)


def _fits(name: str, kind: str, variant: str, dtype: torch.dtype) -> bool:
    """Whether set ``name`` is judged fairly in this kind of call (see the design note)."""
    if kind not in ("pointwise", "reduction"):
        return variant != "backward" and name in ANY_OP and not dtype.is_complex
    if dtype.is_complex:
        return variant != "backward" and name in COMPLEX_SETS
    if variant == "backward":
        return name in ANY_OP
    return kind == "pointwise" or name != "extreme"


def _eligible(t: torch.Tensor, dtype: torch.dtype, kind: str) -> bool:
    if t.dtype != dtype or t.numel() == 0:
        return False
    if dtype.is_floating_point or dtype.is_complex:
        return True
    return kind in ("pointwise", "reduction")  # elsewhere an integer tensor may be an index, a size or a mask


@functools.cache
def op_kind(op: str) -> str:
    """"pointwise", "reduction", "random" or "" (anything else), from OpInfo's classes and aten's tags."""
    entry = opinfo.get(op)
    classes = opclass.classes(entry)
    tags: set = set()
    packet = getattr(torch.ops.aten, getattr(entry, "aten_name", None) or entry.name.split(".")[0], None)
    try:
        tags = {tag for name in packet.overloads() for tag in getattr(packet, name).tags} if packet is not None else set()
    except Exception:  # not an aten op packet
        tags = set()
    if torch.Tag.nondeterministic_seeded in tags:
        return "random"
    if classes & opclass.UFUNCS:
        return "pointwise"
    if "ReductionOpInfo" in classes or getattr(torch.Tag, "reduction", None) in tags:
        return "reduction"
    return "pointwise" if torch.Tag.pointwise in tags else ""


def growth(kind: str, tensors: dict) -> tuple[str, ...]:
    """The ``dim:`` edits that give the call a vector body and a full scalar tail (see the design note); () for none."""
    dimensioned = {path: t for path, t in tensors.items() if t.dim() > 0}
    if not dimensioned:
        return ()
    if kind == "pointwise":
        try:
            shape = torch.broadcast_shapes(*(t.shape for t in dimensioned.values()))
        except RuntimeError:
            return ()
        inner, outer = shape[-1], math.prod(shape[:-1])
        length = _length(outer) if inner and outer else None
        if length is None or length == inner:
            return ()
        return tuple(f"dim:{path}@{t.dim() - 1}>{length}" for path, t in dimensioned.items() if t.shape[-1] == inner)
    if kind == "reduction" and len(dimensioned) == 1:
        (path, t), = dimensioned.items()
        if t.numel() == 0 or t.shape[-1] == SHORTEST or t.numel() // t.shape[-1] * SHORTEST > LONGEST:
            return ()
        return (f"dim:{path}@{t.dim() - 1}>{SHORTEST}",)
    return ()


def _length(outer: int) -> int | None:
    """The innermost length that brings ``outer * length`` nearest to -1 (mod STEP), from SHORTEST elements on, shortest first."""
    best, best_tail = None, -1
    most = STEP - math.gcd(outer, STEP)  # the largest remainder a multiple of outer reaches
    for length in range(1, LONGEST // outer + 1):
        n = outer * length
        if n < SHORTEST or n % STEP <= best_tail:
            continue
        best, best_tail = length, n % STEP
        if best_tail == most:
            break
    return best


SEARCH = Search(name="values", description=DESCRIPTION, edits="one tensor's values", order=10, plan=plan, verb=VERB, form=FORM, apply=apply,
                on_values=True)
