"""``torchsleuth.check``: one op, one call, judged by every oracle of a pointed run (check.api has the design)."""

from .api import CheckResult, check

__all__ = ["CheckResult", "check"]
