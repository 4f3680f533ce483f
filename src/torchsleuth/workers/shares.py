"""How long a case may run before the pool sets it aside: a share of its timeout (workers.dispatch's design note).

On the CPU a case has all of its time (a hang holds one core). On an accelerator the pool's workers share, a
hanging kernel holds the device for all of them, so a case is set aside after a share of its time and replayed alone
at the end with all of it; a case setting searched values (the search's extreme values, where an op hangs) gets a
smaller share; and once a case of a unit setting searched values has hung, the unit's other such cases a smaller one still.
"""

from __future__ import annotations

from .. import devices

# The share of its time a case may take on a GPU the workers share before it is
# set aside (its replay alone at the end gets the whole time): 12 s of 60. While
# hanging kernels run, every other worker's kernels wait their turns: six of them
# (the polynomial units of a catalog sweep, each holding 30 s) took the whole
# pool from about 1,000 cases/s to 112 (bench/cuda-sweep.md, run G). A slow case
# set aside is no error, only a replay at the end: the slowest case that finished
# in run H (the first at this share) took 10.6 s (special.erfcx), none was set aside
# and passed alone.
ACCELERATOR_SHARE = 0.2
# The share of a case setting searched values once a case of its unit setting values has hung and been set aside:
# 1.2 s of 60. An op that hangs on some values most often hangs on others (the polynomial units of a catalog sweep,
# their cases otherwise taking milliseconds: a second wave of six hanging kernels held the device 12 s, the pool at
# about 100 cases/s the while; run L in bench/cuda-sweep.md). A slow case set aside so costs only its replay at the
# end, beside the hangs' own. Not OpInfo's own samples: special.erfcx's, slow while NVRTC compiles its kernel for
# each layout, were set aside 76 times, each compiling again in a fresh worker (run M).
AFTER_A_HANG_SHARE = 0.02
# The share of a case setting searched values on such an accelerator: 6 s of 60. Where an op hangs it is on such
# values (a polynomial's degree of 2^52 + 1), and ten hanging kernels took a pool of 16 workers from 1,259 cases/s to
# 256 (bench/cuda-sweep.md, "Hanging kernels beside the pool", whether their processes waited spinning or sleeping: the device's share, not the
# host's), so the six hanging at once in a catalog sweep cost the pool most of the time they hold. Cases setting
# searched values that finished took at most 4.2 s in runs P and Q (5.3 s in a device stall); OpInfo's own samples
# keep the first share (special.erfcx's first compile, 8.8 s).
SEARCHED_SHARE = 0.1


def first_share(device: str) -> float:
    """How much of its time a case may take before it is set aside: all of it on the CPU (a hang holds one core),
    ``ACCELERATOR_SHARE`` on an accelerator the pool's workers share (a hang holds the device for all of them)."""
    return 1.0 if devices.kind(device) == "cpu" else ACCELERATOR_SHARE


def searched_share(device: str) -> float:
    """The share of a case setting searched values: all of the time on the CPU, ``SEARCHED_SHARE`` on an accelerator
    the pool's workers share."""
    return 1.0 if devices.kind(device) == "cpu" else SEARCHED_SHARE


def after_hang_share(device: str) -> float:
    """The share of a case setting searched values once such a case of its unit has hung: all of the time on the CPU,
    ``AFTER_A_HANG_SHARE`` on an accelerator the pool's workers share."""
    return 1.0 if devices.kind(device) == "cpu" else AFTER_A_HANG_SHARE
