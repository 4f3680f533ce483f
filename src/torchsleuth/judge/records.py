"""Records of the judge stage: a mismatch as data, a finding, and a judged case."""

from __future__ import annotations

from dataclasses import dataclass

from ..cases.records import Case
from ..run.records import CallSpec

# Finding kinds (the findings-file contract; the list may grow).
KINDS = (
    "mismatch",
    "dropped_write",
    "out_ignored",
    "input_mutated",
    "out_of_view_write",
    "random_coverage",
    "nondeterministic",
    "gradient_mismatch",
    "sharding_mismatch",
    "crash",
    "hang",
    "invariant",
    # a device returns where the CPU refuses the same values (shrink.refusals)
    "unchecked_input",
    # the oracle plug-ins (oracles/)
    "size_variance",
    "alias_mismatch",
    "stale_result",
    "capability_mismatch",
    "compile_mismatch",
    "large_size",
    # torchsleuth shard: the simulator in question, never the op
    "roundtrip_mismatch",
    "simulator_mismatch",
    # torchsleuth watch --parity: a sharded run parting from the same script on one rank
    "parity_mismatch",
)

# What each kind says about the op, in a sentence: "addcmul_ drops its writes".
KIND_WORDS = {
    "mismatch": "gives wrong values",
    "dropped_write": "drops its writes",
    "out_ignored": "ignores its out= tensor",
    "input_mutated": "changes an input it should only read",
    "out_of_view_write": "writes outside the view",
    "random_coverage": "leaves elements undrawn or draws impossible values",
    "nondeterministic": "is nondeterministic",
    "gradient_mismatch": "gives wrong gradients",
    "sharding_mismatch": "gives wrong results under sharding",
    "crash": "crashes",
    "hang": "hangs",
    "invariant": "breaks an invariant",
    "unchecked_input": "returns where the CPU refuses the same values",
    "size_variance": "gives an element a result that depends on the tensor around it",
    "alias_mismatch": "gives wrong results when its arguments alias",
    "stale_result": "returns a stale result after an argument changed",
    "capability_mismatch": "gives different results on another CPU instruction set",
    "compile_mismatch": "gives different results under torch.compile",
    "large_size": "gives wrong results at large sizes",
    "roundtrip_mismatch": "does not give a tensor back through distribute and full_tensor()",
    "simulator_mismatch": "gives another answer simulated (LocalTensorMode) than on real process groups",
    "parity_mismatch": "parts from the run on one rank",
}

# What a finding was judged against.
REFERENCES = ("layout", "device", "precision", "contract", "determinism", "isolation",
              # the oracle plug-ins' (oracles/): each judges against its own reference
              "size", "alias", "repeat", "capability", "compile", "large",
              # the autodiff oracle's (one mode against another, or float64 finite differences) and the vmap oracle's
              "reverse-mode", "finite-differences", "forward-over-reverse", "vmap",
              # torchsleuth shard's: the single-device answer, the round trip, real process groups
              "sharding", "roundtrip", "gloo", "nccl",
              # watch --parity's: the same script on one rank
              "parity")


@dataclass(frozen=True, kw_only=True, slots=True)
class Mismatch:
    """Where actual and expected part, and by how much against what was allowed."""

    path: str  # "out", "out[1]", "grad[input]", "self"
    attribute: str  # "shape", "dtype", "stride", "values", "identity", "storage"
    expected: str  # rendered value at the worst place (or the expected metadata)
    actual: str
    mismatched: int = 0  # elements beyond tolerance
    numel: int = 0
    worst_index: tuple[int, ...] = ()
    max_abs_err: float | None = None
    atol: float = 0.0
    rtol: float = 0.0
    allowed: float | None = None  # what was allowed at the worst element

    def describe(self) -> str:
        if self.attribute != "values":
            return f"{self.path}: {self.attribute} expected {self.expected}, got {self.actual}"
        share = f"{self.mismatched}/{self.numel}"
        at = f" at {list(self.worst_index)}" if self.worst_index else ""
        err = "" if self.max_abs_err is None else f"; error {self.max_abs_err:.3g}"
        allowed = "" if self.allowed is None else f", allowed {self.allowed:.3g}"
        return (
            f"{self.path}: {share} elements differ; worst{at}: expected {self.expected}, "
            f"got {self.actual}{err}{allowed} (atol={self.atol:.3g}, rtol={self.rtol:.3g})"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    id: str  # "f-" + a hash of case id and kind; stable across runs
    kind: str  # one of KINDS
    op: str  # the aten overload called, "aten.addcmul_.default"; the OpInfo name if none
    opinfo: str  # the catalog name, "addcmul"
    variant: str
    dtype: str
    device: str
    reference: str  # one of REFERENCES
    case_id: str
    layouts: tuple[tuple[str, str], ...]
    summary: str  # one sentence in the user's terms
    mismatch: Mismatch | None = None
    call: CallSpec | None = None
    detail: str = ""  # what else the oracle knows, for a reader (a crash's signal, a hang's timeout)
    # an oracle plug-in's Detail record as JSON (judge.plugin.encode_detail): what its repro
    # script reads back; never parsed out of ``detail``'s prose
    data: str = ""

    @property
    def name(self) -> str:
        """The op as a person names it: the aten op, with the catalog name when that is another.

        ``addcmul_``, ``linalg_lu``; ``fft.ihfft2 (aten.conj_physical)`` when the
        failing kernel is one a composite op reaches.
        """
        parts = self.op.split(".")
        if len(parts) < 3 or parts[0] != "aten":
            return self.opinfo
        aten = parts[1]
        plain = self.opinfo.split(".")[-1]
        if aten.strip("_").removesuffix("_") in self.opinfo.replace(".", "_") or plain.strip("_") in aten:
            return aten
        return f"{self.opinfo} (aten.{aten})"


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """A judged case. ``status`` is one of STATUSES."""

    case: Case
    status: str
    reason: str = ""  # one line: why skipped, what was raised
    findings: tuple[Finding, ...] = ()
    seconds: float = 0.0
    # the aten overloads the case reached ("aten.add.Tensor"): its references' trace, and what it called by name
    # (cases.reach.reached); the run's kernel coverage sums them per op
    reached: tuple[str, ...] = ()


# pass: judged and clean; finding: judged and wrong; skip: not judged, with a
# reason; raised: the op raised (loud, so not ours to report); error:
# torchsleuth itself failed on the case (a bug in torchsleuth, shown apart).
STATUSES = ("pass", "finding", "skip", "raised", "error")
