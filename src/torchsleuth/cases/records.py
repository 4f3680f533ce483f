"""Records of the cases stage: what the catalog knows about an op, and one case.

A case is one op call: op, variant, the sample it takes its arguments from,
dtype, device, and which argument is re-laid-out how. It holds no tensors; the
run stage rebuilds them from these fields, so a case can cross a process
boundary and be replayed later from its id alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import layouts as layout_table

# How the op is called. "backward" calls the functional variant and then
# autograd on its output.
VARIANTS = ("functional", "method", "inplace", "out", "backward")
# How a variant reads after the op's name: "addcmul_ (in-place)".
VARIANT_WORDS = {"functional": "", "method": " (method)", "inplace": " (in-place)", "out": " (out=)", "backward": " backward"}

# Memory layouts, each a pure transform of one tensor: their names, in the
# order of the table that defines them (cases/layouts.py).
LAYOUTS = tuple(layout.name for layout in layout_table.ALL)

# The dtypes a sweep covers unless --dtypes says otherwise.
DEFAULT_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "bool", "complex64")


@dataclass(frozen=True, kw_only=True, slots=True)
class OpSpec:
    """What the catalog knows about one op, without live objects."""

    name: str  # OpInfo name, with ".variant_test_name" where it has one
    variants: tuple[str, ...]
    dtypes: tuple[str, ...]  # forward dtypes supported on the device type
    backward_dtypes: tuple[str, ...]
    source: str  # "opinfo" or "torchsleuth" (cases the OpInfo database lacks)


@dataclass(frozen=True, kw_only=True, slots=True)
class Unit:
    """The work a worker takes at once: every case of one op and dtype on a device."""

    op: str
    dtype: str
    device: str

    @property
    def key(self) -> str:
        return f"{self.op}|{self.dtype}|{self.device}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    op: str
    variant: str
    dtype: str
    device: str
    sample: int  # index into the op's samples for this dtype
    # (argument path, layout) for every argument that is not contiguous;
    # sorted by path. Empty means every tensor is contiguous.
    layouts: tuple[tuple[str, str], ...] = ()
    # Edits of the sample's sizes and values (cases/edits.py), made by the
    # shrinker; empty for every case a sweep plans.
    edits: tuple[str, ...] = ()
    # The deeper oracle that judges this case instead of the references and
    # contracts ("sizes", "alias:out-overlaps-input", ...: see oracles/); empty
    # for the cases every sweep plans.
    oracle: str = ""

    @property
    def id(self) -> str:
        placed = ",".join(f"{path}={layout}" for path, layout in self.layouts) or "contiguous"
        edited = "|" + ";".join(self.edits) if self.edits else ""
        judged = f"|@{self.oracle}" if self.oracle else ""
        return f"{self.op}|{self.variant}|{self.dtype}|{self.device}|s{self.sample}|{placed}{edited}{judged}"

    @classmethod
    def parse(cls, case_id: str) -> "Case":
        """The case an id names (the inverse of ``Case.id``)."""
        op, variant, dtype, device, sample, placed, *rest = case_id.split("|")
        oracle = rest.pop()[1:] if rest and rest[-1].startswith("@") else ""
        layouts = () if placed == "contiguous" else tuple(tuple(part.split("=", 1)) for part in placed.split(","))
        edits = tuple(rest[0].split(";")) if rest else ()
        return cls(op=op, variant=variant, dtype=dtype, device=device, sample=int(sample.removeprefix("s")), layouts=layouts,
                   edits=edits, oracle=oracle)

    @property
    def unit(self) -> Unit:
        return Unit(op=self.op, dtype=self.dtype, device=self.device)

    def layout_of(self, path: str) -> str:
        for p, layout in self.layouts:
            if p == path:
                return layout
        return "contiguous"
