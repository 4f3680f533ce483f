"""What the large oracle's creation probes found on CUDA, checked in plain torch: factories past 2^31 and 2^32 elements.

    python3 bench/probes/creation_past_2_32.py [--device cuda] [--out DIR]

Run on 2026-12-02 (1x H200, torch 2.11; bench/cuda-search.md): ``arange`` in bfloat16, ``linspace`` in float32 and
``logspace`` in bfloat16 over 2^32 + 4096 elements, each read at the elements around 2^31 and 2^32 against the value
expected there; and ``linspace`` in float16 over 65521 steps. Needs about 17 GB of device memory.
"""

import argparse

import _out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", metavar="DIR", help="also write what it prints to DIR/creation.txt")
    args = parser.parse_args()
    import torch

    device, n = args.device, 2**32 + 4096
    with _out.tee(args.out, "creation.txt"):
        for name, make, expect in (
            ("arange bfloat16", lambda: torch.arange(n, dtype=torch.bfloat16, device=device),
             lambda i: float(torch.tensor(float(i), dtype=torch.bfloat16))),
            ("linspace float32", lambda: torch.linspace(1, 3, n, dtype=torch.float32, device=device), lambda i: 1 + 2 * i / (n - 1)),
            ("logspace bfloat16", lambda: torch.logspace(-1, 1, n, base=2, dtype=torch.bfloat16, device=device),
             lambda i: 2 ** (-1 + 2 * i / (n - 1))),
        ):
            t = make()
            for i in (0, 2**31 - 1, 2**31, 2**32 - 1, 2**32, n - 1):
                print(f"{name} [{n} elements] element {i}: {t[i].item():.6g} (expected about {expect(i):.6g})")
            del t
            torch.cuda.empty_cache() if device.startswith("cuda") else None
        h = torch.linspace(1, 3, 65521, dtype=torch.float16, device=device)
        print(f"linspace float16 65521 steps on {device}: first", h[:2].tolist(), "middle", h[32760].item(), "last", h[-1].item())


if __name__ == "__main__":
    main()
