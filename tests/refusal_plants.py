"""Plants for the refusal differential's tests (shrink.refusals, search.bounds): a kernel without its bounds check.

On a CPU-only machine the device is simulated: the CPU is counted among the devices where a bad index asserts
(``run.references.ASSERTING``), so the sweep sets aside the cases whose values the CPU refuses exactly as it does on
CUDA, and the plant stands for a device kernel without its bounds check: it checks its indices only where the CPU
reference is computed (the sweep's ``References.cpu``, a repro script's ``reference``), as the CPU's kernel does, and
everywhere else wraps them (``from refusal_plants import UNCHECKED``; tests/conftest.py puts this folder on the path).
"""

# The plant, as source: a test executes it, or writes it to a module a run imports.
UNCHECKED = '''
import sys as _sys
import torch as _torch

def _where_the_cpu_checks():
    frame = _sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in ("cpu", "reference"):
            return True
        frame = frame.f_back
    return False

def unchecked_index_select(self, dim, index):
    """index_select without its bounds check (as a device kernel lacking it): indices wrap, none is refused."""
    flat = self.reshape(1) if self.dim() == 0 else self
    n = flat.shape[dim]
    out_of_range = index.numel() != 1 if self.dim() == 0 else bool(((index < -n) | (index >= n)).any())
    if out_of_range and _where_the_cpu_checks():
        raise IndexError("index out of range in self")
    index = index.reshape(-1)
    if n == 0:
        shape = list(flat.shape)
        shape[dim] = index.numel()
        return flat.new_zeros(shape)
    picked = flat.movedim(dim, 0)[index.remainder(n)].movedim(0, dim)
    return picked.reshape(()) if self.dim() == 0 and picked.numel() == 1 else picked

import warnings as _warnings
_library = _torch.library.Library("aten", "IMPL")
with _warnings.catch_warnings():
    _warnings.simplefilter("ignore")  # overriding aten's kernel is the point
    _library.impl("index_select", unchecked_index_select, "CPU")
'''


# The module the run imports (``--import``) in the CLI's process and in its workers: the plant, on a simulated device.
SIMULATED = UNCHECKED + '''
import torchsleuth.run.references as _references
_references.ASSERTING = frozenset({"cpu", "cuda"})
'''


