"""Planted: ``fill_`` writes one element past the end of its view."""

from ..kernels import fill_writing_past_its_view
from ..override import planted

library = planted("fill_.Scalar", fill_writing_past_its_view)  # lives as long as the worker
