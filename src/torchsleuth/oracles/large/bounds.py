"""Where 32-bit offsets wrap, how long a probe's tensor is, which positions it reads, and whether it fits.

Design note. The element probes (large.elements) and the index probes
(large.index) share these: ``PROBES`` gives a probe's length past its
boundary, ``positions`` the elements read (both sides of every boundary
below the length, the ends, and ``DRAWN`` seeded draws), and
``short_of_memory`` says why a probe would not fit in what the device has
free now (the CPU's MemAvailable, CUDA's free memory). Tests move
``BOUNDS`` down to small sizes: everything here reads it when called.
"""

from __future__ import annotations

import torch

PAD = 4096
# Where 32-bit offsets wrap: 2^31 (signed) and 2^32 (unsigned) elements, and 2^31 bytes.
BOUNDS = (1 << 31, 1 << 32)
PROBES = {"2^31": lambda itemsize: BOUNDS[0] + PAD, "2^32": lambda itemsize: BOUNDS[-1] + PAD,
          "bytes": lambda itemsize: -(-(BOUNDS[0] + PAD) // itemsize)}
# Values tiled: position i holds value i % d, d odd (at most DISTINCT), so a
# position read through an offset wrapped by a power of two holds another value.
DISTINCT = 1023
DRAWN = 32  # positions drawn at random, besides the boundaries
HEADROOM = 1.5  # the estimate times this must fit in free memory


def boundary(name: str) -> str:
    """A probe's boundary in words: "past 2^31 elements"."""
    return {"2^31": "past 2^31 elements", "2^32": "past 2^32 elements", "bytes": "past 2^31 bytes"}[name]


def positions(n: int) -> torch.Tensor:
    """The boundaries' neighbours below ``n``, the ends, and DRAWN seeded positions."""
    marks = {0, 1, n - 2, n - 1}
    for bound in BOUNDS:
        marks |= {bound - 2, bound - 1, bound, bound + 1}
    generator = torch.Generator().manual_seed(n)
    marks |= set(torch.randint(n, (DRAWN,), generator=generator).tolist())
    return torch.tensor(sorted(m for m in marks if 0 <= m < n), dtype=torch.int64)


def span(positions: torch.Tensor) -> str:
    """Positions in a finding's words: the first twelve, and how many in all."""
    listed = positions.tolist()
    return ", ".join(str(p) for p in listed[:12]) + (f", ... ({len(listed)} in all)" if len(listed) > 12 else "")


def short_of_memory(device: str, need: int) -> str:
    """Why ``need`` bytes (with half again for temporaries) do not fit on ``device`` now; "" when they do."""
    free = free_bytes(device)
    if need * HEADROOM > free:
        return f"needs about {need * HEADROOM / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free on {device}"
    return ""


def free_bytes(device: str) -> int:
    kind = torch.device(device).type
    if kind == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free
    if kind == "cpu":
        return _mem_available()
    return 0  # other devices: unknown, so no probe runs


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
