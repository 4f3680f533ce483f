"""Whether a compiled function is reused for an input at a storage offset, with the planted sinh lowering (bench/compiled-cuda.md).

    python3 bench/probes/compile_offset_reuse.py [--out DIR]

tests/inductor_plants.py's ``sinh`` plant reads its input as if contiguous, at the offset inductor's layout of that
input names. Dynamo guards a tensor's sizes and strides but not its storage offset, so a function compiled for a
contiguous input runs again, without a compile, for the same input at an offset; a function compiled for the input
at the offset is another graph. The script calls ``torch.sinh`` compiled (inductor, static shapes, on-disk caches off)
three ways, each against eager: compiled on a contiguous input and called on it; the same function called on the input
at storage offset 3 (how many graphs dynamo compiled for it is printed: 0 is a reuse); and a fresh compile called on the
input at the offset. Exits 0: it reports, it does not judge.
"""

import argparse
import os
import sys

import _out  # noqa: F401  (this checkout's torchsleuth, unused here; --out)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="also keep the output in OUT/compile_offset_reuse.txt")
    args = parser.parse_args()
    import torch
    from torch._inductor import config as inductor_config

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import inductor_plants

    inductor_config.fx_graph_cache = False
    graphs = []

    def counting(graph, example_inputs):
        graphs.append(1)
        return torch._dynamo.lookup_backend("inductor")(graph, example_inputs)

    def at_offset(t, offset=3):
        storage = torch.full((t.numel() + offset,), float("nan"))
        view = storage.as_strided(t.shape, t.stride(), offset)
        view.copy_(t)
        return view

    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    with _out.tee(args.out, "compile_offset_reuse.txt"), inductor_plants.planted():
        print(f"torch {torch.__version__}; sinh planted (tests/inductor_plants.py)")
        compiled = torch.compile(torch.sinh, backend=counting, fullgraph=True, dynamic=False)
        right = torch.allclose(compiled(x), torch.sinh(x))
        print(f"compiled on a contiguous input, called on it: {'right' if right else 'WRONG'} ({len(graphs)} graph)")
        before = len(graphs)
        right = torch.allclose(compiled(at_offset(x)), torch.sinh(x))
        print(f"the same function, called at storage offset 3: {'right' if right else 'WRONG'} ({len(graphs) - before} graphs compiled for it)")
        torch._dynamo.reset()
        fresh = torch.compile(torch.sinh, backend=counting, fullgraph=True, dynamic=False)
        before = len(graphs)
        right = torch.allclose(fresh(at_offset(x)), torch.sinh(x))
        print(f"a fresh compile, called at storage offset 3: {'right' if right else 'WRONG'} ({len(graphs) - before} graph)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
