"""Planted: ``neg`` never returns when its input is transposed; the pool kills the worker after the timeout."""

from ..kernels import neg_hanging_on_transposed
from ..override import planted

library = planted("neg", neg_hanging_on_transposed)  # lives as long as the worker
