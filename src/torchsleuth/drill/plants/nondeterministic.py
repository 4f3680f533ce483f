"""Planted: ``neg`` answers differently (by a few units of roundoff) on every call."""

from ..kernels import neg_counting_calls
from ..override import planted

library = planted("neg", neg_counting_calls)  # lives as long as the worker
