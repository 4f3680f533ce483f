"""``torchsleuth optim``: do all optimizer implementations agree, on every layout and dtype?

Design note. The seed story's optimizer was right and its kernel wrong:
Adam's state, made by ``zeros_like`` from a transposed parameter, was
transposed too, and the MPS ``addcmul_``/``addcdiv_`` dropped their writes
into it. This package runs every optimizer in ``torch.optim`` for a few
steps over a matrix that reaches such kernels, and judges every run:

    optimizer (discovered) x implementation (for-loop, foreach, fused)
      x setting x dtype x parameter layout

where the settings are the defaults, each option toggled alone, and each
hyperparameter at the edges of its range, alone and with the flags
combined (a rule per name and default, never a table per optimizer); a
pointed run takes every edge setting, a run over all optimizers a seeded
sample. Contracts need no reference: lr=0 and a zero gradient move no
parameter and keep the state finite where the math says so, and a tensor
hyperparameter gives what its number gives.

Modules, in pipeline order: ``matrix`` (discovery, the records, the
options), ``edges`` (the hyperparameter rules and the settings' names),
``plan`` (which settings a run takes, at what depth, in what order),
``core`` (the runs themselves, torch-only, copied into every repro script),
``run`` (a run, the references, what a refusal means), ``judge`` (the
allowance rule and the findings), ``contracts`` (where a contract holds,
and its findings), ``repro`` (scripts), ``sweep`` (the store and the
outputs). Each module's note says why it does what it does; the allowance
rule is in ``judge``'s.

Records that leave the package are the pipeline's own: a ``Case`` per
configuration (op = the optimizer's class name, variant = the
implementation, layouts = ``(("param", layout),)``, the option as an edit
``option:amsgrad``), an ``Outcome`` per configuration in the store, a
``Finding`` (op ``torch.optim.Adam``) per thing wrong. So the store, the
terminal summary, the findings file, ``torchsleuth report`` and ``diff``
read an optim run as they read an ops run.
"""

from .matrix import DEFAULT_DTYPES, DTYPES, IMPLEMENTATIONS, OptimConfig, OptimSpec, discover, names
from .core import LAYOUTS
from .sweep import sweep

__all__ = [
    "DEFAULT_DTYPES",
    "DTYPES",
    "IMPLEMENTATIONS",
    "LAYOUTS",
    "OptimConfig",
    "OptimSpec",
    "discover",
    "names",
    "sweep",
]
