"""The bug classes the drill plants: each with its op, its planted condition, and the finding that catches it.

Design note. A class is one oracle's bug: the fault is planted (by the
module ``plant`` names, in a sweep worker) and the smallest sweep that
reaches it runs: one op, one dtype, one variant, the contiguous layout and
the planted one, one sample. The class is caught when that sweep reports a
finding of the expected ``kind`` against the expected ``reference``, on the
planted kernel (``ops``: the names ``Finding.op`` may carry), with exactly
the planted ``trigger`` as its case's layouts. A finding of the right kind
blamed on the wrong argument or layout does not count: the drill checks
that a report points at the bug, not only that it noticed one.

The sweeps match those of tests/project/test_planted.py, which plants the same
kernels (drill.kernels) in its own process and checks more about each
finding (tests/judge/test_draws.py plants its own stride-ignoring ``bernoulli``);
these are the few facts a user needs to see on their own machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cases.records import Case
from ..config import DEFAULT_TIMEOUT
from ..judge.records import Finding

PLANTS = "torchsleuth.drill.plants"


@dataclass(frozen=True, kw_only=True, slots=True)
class BugClass:
    name: str
    op: str  # the catalog (OpInfo) name swept
    condition: str  # what is planted, in the user's terms
    kind: str  # the Finding.kind that catches it
    reference: str  # what the finding is judged against
    ops: tuple[str, ...]  # Finding.op of a finding on the planted kernel
    trigger: tuple[tuple[str, str], ...]  # the finding's case layouts: the planted condition, exactly
    plant: str  # module (or .py file) each sweep worker imports: it installs the fault
    dtypes: tuple[str, ...] = ("float32",)
    variants: tuple[str, ...]
    layouts: tuple[str, ...] = ("contiguous",)
    samples: int = 1
    timeout: float = DEFAULT_TIMEOUT
    search: tuple[str, ...] = ()  # the searches whose cases reach the planted condition

    @property
    def expected(self) -> str:
        """``kind (reference)`` on the trigger, as the table shows it."""
        return f"{self.kind} ({self.reference}) on {placed(self.trigger)}"

    def catches(self, finding: Finding) -> bool:
        return (
            finding.kind == self.kind
            and finding.reference == self.reference
            and finding.opinfo == self.op
            and finding.op in self.ops
            and finding.layouts == self.trigger
        )

    def covers(self, finding: Finding) -> bool:
        """Whether ``finding``'s case is one this class's sweep runs (so that, unplanted, it must pass)."""
        sample = Case.parse(finding.case_id).sample
        return (
            finding.opinfo == self.op
            and finding.dtype in self.dtypes
            and finding.variant in self.variants
            and all(layout in self.layouts for _, layout in finding.layouts)
            # one sample is the first; more are spread over the list, so any index may be among them
            and (self.samples != 1 or sample == 0)
        )


CLASSES: tuple[BugClass, ...] = (
    BugClass(
        name="dropped_write", op="addcmul", condition="in-place addcmul_ drops its write to a non-contiguous self",
        kind="dropped_write", reference="layout", ops=("aten.addcmul_.default",), trigger=(("input", "transposed"),),
        plant=f"{PLANTS}.dropped_write", variants=("inplace",), layouts=("contiguous", "transposed"),
    ),
    BugClass(
        name="out_strides", op="neg", condition="neg(out=) restrides a transposed out to contiguous strides",
        kind="out_ignored", reference="contract", ops=("aten.neg.out",), trigger=(("out", "transposed"),),
        plant=f"{PLANTS}.out_strides", variants=("out",), layouts=("contiguous", "transposed"),
    ),
    BugClass(
        name="input_mutated", op="neg", condition="functional neg doubles its input",
        kind="input_mutated", reference="contract", ops=("aten.neg.default",), trigger=(),
        plant=f"{PLANTS}.input_mutated", variants=("functional",),
    ),
    BugClass(
        name="nondeterministic", op="neg", condition="neg's last bits change on every call",
        kind="nondeterministic", reference="determinism", ops=("aten.neg.default",), trigger=(),
        plant=f"{PLANTS}.nondeterministic", variants=("functional",),
    ),
    BugClass(
        name="out_of_view_write", op="fill", condition="fill_ writes one element past its view",
        kind="out_of_view_write", reference="contract", ops=("aten.fill_.Scalar",), trigger=(),
        plant=f"{PLANTS}.out_of_view_write", variants=("inplace",),
    ),
    BugClass(
        name="storage_offset", op="sum", condition="sum ignores its input's storage offset",
        kind="mismatch", reference="layout", ops=("aten.sum.default", "aten.sum.dim_IntList"), trigger=(("input", "offset"),),
        plant=f"{PLANTS}.storage_offset", variants=("functional",), layouts=("contiguous", "offset"),
    ),
    BugClass(
        # strided, not transposed: uniform's first sample is 1-D
        name="random_coverage", op="uniform", condition="uniform_ fills every other element of a non-contiguous self",
        kind="random_coverage", reference="contract", ops=("aten.uniform_.default",), trigger=(("input", "strided"),),
        plant=f"{PLANTS}.random_coverage", variants=("inplace",), layouts=("contiguous", "strided"),
    ),
    BugClass(
        # only the draws search's probabilities of 0 and 1 tell a misread p: OpInfo's are in (0, 1)
        name="random_draws", op="bernoulli", condition="bernoulli reads its probabilities p as if contiguous",
        kind="random_coverage", reference="contract", ops=("aten.bernoulli.default",), trigger=(("input", "strided"),),
        plant=f"{PLANTS}.random_draws", variants=("functional",), layouts=("contiguous", "strided"), search=("draws",),
    ),
    BugClass(
        # two samples: the first, and the last, which is the engine's long reduction (3 x 1024)
        name="accumulation", op="sum", condition="a bfloat16 sum accumulates in bfloat16, not float32",
        kind="mismatch", reference="precision", ops=("aten.sum.dim_IntList",), trigger=(),
        plant=f"{PLANTS}.accumulation", dtypes=("bfloat16",), variants=("functional",), samples=2,
    ),
    BugClass(
        name="gradient", op="tanh", condition="tanh's backward doubles a non-contiguous output gradient",
        kind="gradient_mismatch", reference="layout", ops=("aten.tanh.default",), trigger=(("grad_output[0]", "transposed"),),
        plant=f"{PLANTS}.gradient", variants=("backward",), layouts=("contiguous", "transposed"),
    ),
    BugClass(
        # no call is traced when the worker dies, so the finding names the catalog op
        name="crash", op="neg", condition="neg kills its process (SIGSEGV) on a transposed input",
        kind="crash", reference="isolation", ops=("neg",), trigger=(("input", "transposed"),),
        plant=f"{PLANTS}.crash", variants=("functional",), layouts=("contiguous", "transposed"),
    ),
    BugClass(
        # a short timeout: the hang costs it twice (the case, then its replay alone)
        name="hang", op="neg", condition="neg never returns on a transposed input",
        kind="hang", reference="isolation", ops=("neg",), trigger=(("input", "transposed"),),
        plant=f"{PLANTS}.hang", variants=("functional",), layouts=("contiguous", "transposed"), timeout=2.0,
    ),
)

def placed(layouts: tuple[tuple[str, str], ...]) -> str:
    """A case's layouts as the user reads them: "input=transposed", or "contiguous"."""
    return ", ".join(f"{path}={layout}" for path, layout in layouts) or "contiguous"


NAMES: tuple[str, ...] = tuple(c.name for c in CLASSES)
BY_NAME: dict[str, BugClass] = {c.name: c for c in CLASSES}
