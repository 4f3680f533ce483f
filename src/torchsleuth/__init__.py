"""torchsleuth: find the PyTorch bug that isn't yours.

Silent correctness bugs (kernels that return wrong numbers and raise nothing)
found by judging every op call against references and contracts. The Python
API is the product; the ``torchsleuth`` command is a thin layer over it. Each
entry point returns its result with the outputs asked for already written
(``out``: repro scripts, ``json``: the findings file, ``junit``: JUnit XML);
docs/python-api.md has an example of each.

    import torchsleuth
    result = torchsleuth.check(my_op)            # a custom op, an aten overload, or a callable with samples=
    result.assert_clean()                        # one AssertionError naming each bug, its diagnosis and repro script

    config = torchsleuth.SweepConfig(ops=torchsleuth.resolve_ops("addcmul,sum"), workers=2)
    result = torchsleuth.sweep(config, db="runs.db", out="out", json="out/findings.json", junit="out/junit.xml")
"""

from ._version import __version__
from .cases.records import DEFAULT_DTYPES, LAYOUTS, VARIANTS, Case, Unit
from .cases.select import resolve_ops
from .check import CheckResult, check
from .config import SweepConfig
from .drill import DrillResult, drill
from .errors import ExitCode, UsageError
from .judge.records import Finding, Mismatch, Outcome
from .optim import OptimConfig
from .optim.sweep import sweep as optim
from .report.outputs import write_outputs
from .shard import ShardConfig
from .shard.sweep import sweep as shard
from .frame import Progress, SweepResult
from .sweep import sweep
from .watch import watch

__all__ = [
    "DEFAULT_DTYPES",
    "LAYOUTS",
    "VARIANTS",
    "Case",
    "CheckResult",
    "DrillResult",
    "ExitCode",
    "Finding",
    "Mismatch",
    "OptimConfig",
    "Outcome",
    "Progress",
    "ShardConfig",
    "SweepConfig",
    "SweepResult",
    "Unit",
    "UsageError",
    "__version__",
    "check",
    "drill",
    "optim",
    "resolve_ops",
    "shard",
    "sweep",
    "watch",
    "write_outputs",
]
