"""The autodiff oracle (see oracle.py's design note)."""

from .oracle import ORACLE

__all__ = ["ORACLE"]
