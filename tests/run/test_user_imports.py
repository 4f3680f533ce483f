"""``--import FILE.py``: a kernel a file registers at its top level stays registered, and a crash in it is placed there."""

from __future__ import annotations

import gc

import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.workers import faults
from torchsleuth.run.imports import IMPORTED as _IMPORTED
from torchsleuth.run.imports import load_imports

PLANT = """
import warnings

import torch

from torchsleuth.drill.kernels import addcmul_dropping_noncontiguous_writes

library = torch.library.Library("aten", "IMPL")  # held by nothing but this file's globals
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("addcmul_", addcmul_dropping_noncontiguous_writes, "CPU")
"""


def test_a_library_held_only_by_an_imported_file_stays_alive(tmp_path):
    path = tmp_path / "plant.py"
    path.write_text(PLANT)
    load_imports((str(path),))
    try:
        gc.collect()
        self = torch.zeros(3, 2).t()  # not contiguous: the planted kernel drops the write
        self.addcmul_(torch.ones(2, 3), torch.ones(2, 3))
        assert bool((self == 0).all())
    finally:
        _IMPORTED.pop(str(path))["library"]._destroy()
    self = torch.zeros(3, 2).t()
    self.addcmul_(torch.ones(2, 3), torch.ones(2, 3))
    assert bool((self == 1).all())  # the real kernel again


DYING = """
import os
import signal
import warnings

import torch


def neg_dying_on_transposed(self):
    if self.dim() == 2 and self.stride(0) < self.stride(1):
        os.kill(os.getpid(), signal.SIGSEGV)
    return self * -1


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("neg", neg_dying_on_transposed, "CPU")
"""


def test_a_crash_in_an_imported_files_kernel_names_that_file_and_function(tmp_path, run_sweep):
    path = tmp_path / "dying.py"
    path.write_text(DYING)
    config = SweepConfig(ops=resolve_ops("neg"), dtypes=("float32",), variants=("functional",), layouts=("contiguous", "transposed"),
                         samples=2, workers=1, shrink=False, imports=(str(path),))
    result = run_sweep(config)
    crashes = [f for f in result.findings if f.kind == "crash"]
    assert crashes and all(f.op == "neg" and ("input", "transposed") in f.layouts for f in crashes), result.reasons
    for finding in crashes:  # where it died (workers.faults): the user's kernel, in the user's file, called from the case's call
        place = faults.placed(finding.detail)
        assert place.startswith(f"{path}:") and " neg_dying_on_transposed < run/call.py:" in place, finding.detail
