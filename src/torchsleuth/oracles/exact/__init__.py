from .oracle import ORACLE

__all__ = ["ORACLE"]
