"""``torchsleuth drill``: can a clean report be trusted on this machine?

Design note. A clean sweep means something only if the oracles would have
caught the bug had it been there. The drill plants one fault per bug class
the oracles target (a torch.library override of one aten CPU kernel, wrong
in one way under one condition: ``kernels``), each in the worker process of
a small sweep of its own (``plants``, loaded through ``SweepConfig.imports``;
never in this process), and checks that the sweep reports the expected kind
of finding on the planted op and condition (``classes``). One more sweep of
the same ops without plants is the control: a finding there, on a drilled
case, is a false alarm. The verdict is "trustworthy" when every class is
caught and the control is clean (``runner``).

Modules: ``kernels`` (the wrong kernels, installed by nothing), ``override``
(torch.library), ``plants`` (one module per class that installs its kernel
on import), ``classes`` (what each class sweeps and expects), ``records``,
``runner`` (the sweeps), ``report`` (table and JSON).
"""

from .classes import BY_NAME, CLASSES, NAMES, BugClass
from .records import ClassResult, ControlResult, DrillResult
from .runner import DrillProgress, drill

__all__ = [
    "BY_NAME",
    "CLASSES",
    "NAMES",
    "BugClass",
    "ClassResult",
    "ControlResult",
    "DrillProgress",
    "DrillResult",
    "drill",
]
