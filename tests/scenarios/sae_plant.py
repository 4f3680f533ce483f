"""The seed story's bug, planted: in-place addcmul_ and addcdiv_ drop their writes on a non-contiguous self.

Imported (``torchsleuth watch --import``, ``torchsleuth optim --import``) it
replaces both CPU kernels for as long as the process lives.
"""

from torchsleuth.drill.kernels import addcmul_dropping_noncontiguous_writes
from torchsleuth.drill.override import planted


def addcdiv_dropping_noncontiguous_writes(self, tensor1, tensor2, *, value=1):
    if not self.is_contiguous():
        return self  # the bug: nothing lands in self
    return self.add_(tensor1 / tensor2 * value)


libraries = [
    planted("addcmul_", addcmul_dropping_noncontiguous_writes),
    planted("addcdiv_", addcdiv_dropping_noncontiguous_writes),
]
