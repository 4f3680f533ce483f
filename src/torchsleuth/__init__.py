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

import importlib
import sys
import types

from ._version import __version__
from .errors import ExitCode, UsageError

# The public names, each loaded from its module the first time it is asked for: `import torchsleuth` (and the
# command line, which lives in the package) costs no torch import until something that needs torch is used.
_EXPORTS = {
    "DEFAULT_DTYPES": ".cases.records", "LAYOUTS": ".cases.records", "VARIANTS": ".cases.records", "Case": ".cases.records",
    "Unit": ".cases.records", "resolve_ops": ".cases.select", "CheckResult": ".check", "check": ".check",
    "SweepConfig": ".config", "DrillResult": ".drill", "drill": ".drill", "Finding": ".judge.records",
    "Mismatch": ".judge.records", "Outcome": ".judge.records", "OptimConfig": ".optim", "optim": (".optim.sweep", "sweep"),
    "write_outputs": ".report.outputs", "ShardConfig": ".shard", "shard": (".shard.sweep", "sweep"),
    "Progress": ".frame", "SweepResult": ".frame", "sweep": ".sweep", "watch": ".watch",
}


class _Api(types.ModuleType):
    """This module, whose public names load on first use. Six of them (check, drill, optim, shard, sweep, watch) are
    also submodules, which the import system sets on their package when it loads them: the function keeps the name."""

    def __getattr__(self, name: str):
        if name not in _EXPORTS:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module, attribute = _EXPORTS[name] if isinstance(_EXPORTS[name], tuple) else (_EXPORTS[name], name)
        value = getattr(importlib.import_module(module, __name__), attribute)
        types.ModuleType.__setattr__(self, name, value)
        return value

    def __setattr__(self, name: str, value) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        types.ModuleType.__setattr__(self, name, value)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_EXPORTS))


sys.modules[__name__].__class__ = _Api

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
