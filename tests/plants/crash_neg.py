"""Planted crash: ``neg`` kills its process when its input is transposed.

Loaded by each sweep worker through ``SweepConfig.imports`` (never imported
by the test process itself, which would die with it).
"""

import os
import signal
import warnings

import torch


def _neg(self):
    if self.dim() == 2 and self.stride(0) < self.stride(1):  # transposed, and only that
        os.kill(os.getpid(), signal.SIGSEGV)
    return self * -1


_lib = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
    _lib.impl("neg", _neg, "CPU")
