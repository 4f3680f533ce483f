"""Device call of the 2026-12-02 session (1x H200, torch 2.11): plain-torch checks of what the creation probes found on CUDA.

    python bench/h200_batch9.py
"""
import torch

n = 2**32 + 4096
for name, make, expect in (
    ("arange bfloat16", lambda: torch.arange(n, dtype=torch.bfloat16, device="cuda"), lambda i: float(torch.tensor(float(i), dtype=torch.bfloat16))),
    ("linspace float32", lambda: torch.linspace(1, 3, n, dtype=torch.float32, device="cuda"), lambda i: 1 + 2 * i / (n - 1)),
    ("logspace bfloat16", lambda: torch.logspace(-1, 1, n, base=2, dtype=torch.bfloat16, device="cuda"), lambda i: 2 ** (-1 + 2 * i / (n - 1))),
):
    t = make()
    for i in (0, 2**31 - 1, 2**31, 2**32 - 1, 2**32, n - 1):
        print(f"{name} [{n} elements] element {i}: {t[i].item():.6g} (expected about {expect(i):.6g})")
    del t
    torch.cuda.empty_cache()
h = torch.linspace(1, 3, 65521, dtype=torch.float16, device="cuda")
print("linspace float16 65521 steps on cuda: first", h[:2].tolist(), "middle", h[32760].item(), "last", h[-1].item())
