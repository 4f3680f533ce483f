"""torchsleuth: find the PyTorch bug that isn't yours.

Silent correctness bugs (kernels that return wrong numbers and raise nothing)
found by judging every op call against references and contracts. The Python
API is the product; the ``torchsleuth`` command is a thin layer over it.

    import torchsleuth
    config = torchsleuth.SweepConfig(ops=torchsleuth.resolve_ops("addcmul,sum"), workers=2)
    result = torchsleuth.sweep(config, db="runs.db", out="out", json="out/findings.json", junit="out/junit.xml")
    for finding in result.findings:
        print(finding.summary)
    print(result.written)  # the findings file, JUnit XML and out/repros/<id>.py, one script per finding
"""

from ._version import __version__
from .cases.records import DEFAULT_DTYPES, LAYOUTS, VARIANTS, Case, Unit
from .cases.select import resolve_ops
from .config import SweepConfig
from .errors import ExitCode, UsageError
from .judge.records import Finding, Mismatch, Outcome
from .sweep import Progress, SweepResult, sweep
from .watch import watch

__all__ = [
    "DEFAULT_DTYPES",
    "LAYOUTS",
    "VARIANTS",
    "Case",
    "ExitCode",
    "Finding",
    "Mismatch",
    "Outcome",
    "Progress",
    "SweepConfig",
    "SweepResult",
    "Unit",
    "UsageError",
    "__version__",
    "resolve_ops",
    "sweep",
    "watch",
]
