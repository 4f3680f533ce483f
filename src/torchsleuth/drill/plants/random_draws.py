"""Planted: ``bernoulli`` reads its probabilities as if they were contiguous."""

from ..kernels import bernoulli_reading_p_as_if_contiguous
from ..override import planted

library = planted("bernoulli", bernoulli_reading_p_as_if_contiguous)  # lives as long as the worker
