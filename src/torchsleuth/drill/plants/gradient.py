"""Planted: ``tanh``'s backward is wrong when the output gradient is not contiguous."""

from ..kernels import tanh_backward_wrong_on_noncontiguous_grad
from ..override import planted

library = planted("tanh_backward", tanh_backward_wrong_on_noncontiguous_grad)  # lives as long as the worker
