"""Repro scripts for shard findings: standalone, needing only torch; simulated, or real under torchrun.

Design note. A script is a header (what was found, how to run it), the
case as literals (mesh, placements, dtype, the sample's tensors inline,
compressed), the function called (its public name, or the source of a
composite chain), split.py's ``share`` verbatim (so Partial inputs are the
very values the sweep made), and a ``main`` that computes the single-device
answer, builds the mesh, places every argument, calls the op on DTensors
and compares ``full_tensor()`` on every rank with it. Run plainly it builds
the mesh with ``LocalTensorMode`` in one process; launched with
``torchrun --nproc-per-node N`` (the header gives the command) it runs on
real process groups (gloo on the CPU, NCCL for cuda), which is how a
``simulator_mismatch`` or ``roundtrip_mismatch`` is told from a DTensor
bug. On a torch without LocalTensorMode (before 2.10), or where the
simulator refuses the case (ranks that read different Python numbers from
a DTensor: LocalTensorMode's "Non Tensor or int rank results must be equal
for all ranks"), the plain run starts N gloo processes of its own (the
script itself, ranks through a file store) and checks there; DTensor's names come from ``torch.distributed._tensor`` on torch
2.4. It prints the wrong and the right result and exits 1 while the bug is
present, 0 once it is gone, 2 when it cannot check. A script that sets
``ALSO_GLOO`` (watch's, of a call a live program made) checks both ways in
one run: simulated, then on gloo processes of its own, each result saying
where it was found.
"""

from __future__ import annotations

import base64
import inspect
import io
import zlib
from pathlib import Path
from typing import Iterable

import torch

from .._version import __version__
from ..cases.records import Case
from ..judge.records import Finding
from ..run import tree
from . import cases as shard_cases, composites, placements as placing, split, surface


def write_scripts(findings: Iterable[Finding], config, out: str | Path) -> dict[str, Path]:
    folder = Path(out) / "repros"
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for finding in findings:
        path = folder / f"{finding.id}.py"
        path.write_text(script(finding), encoding="utf-8")
        written[finding.id] = path
    return written


def _tensors_blob(tensors: dict) -> str:
    buffer = io.BytesIO()
    torch.save({p: t.detach().cpu().contiguous() for p, t in tensors.items()}, buffer)
    return base64.b85encode(zlib.compress(buffer.getvalue(), 9)).decode()


def script(finding: Finding) -> str:
    case = Case.parse(finding.case_id)
    mesh = shard_cases.mesh_of(case)
    sample = shard_cases.sample_of(case)
    args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
    tensors = tree.call_leaves(args, kwargs)
    call = finding.call
    if composites.is_composite(case.op):
        function = f"({composites.source(case.op)})"
    elif surface.is_surface(case.op):  # the chain's own source (a Python number it reads made a tensor, as judged)
        function = surface.repro_source(case.op)
    elif call is not None and call.function:
        function = call.function
    else:
        function = _opinfo_source(case.op)
    try:
        args_src, kwargs_src = tree.call_source(args, kwargs)
    except tree.Unrepresentable as e:
        return _unrepresentable(finding, str(e))
    backward = case.variant == "backward"
    grad_paths = [p for p, t in tensors.items() if t.is_floating_point()] if backward else []
    placed = {p: dict(case.layouts).get(p, ".".join("R" * len(mesh.shape))) for p in tensors}
    plain = case.op == composites.SELF_CHECK
    literals = {
        "FINDING": finding.id, "KIND": finding.kind, "MESH": mesh.shape, "PLACEMENTS": placed, "GRAD_PATHS": grad_paths,
        "PLAIN_INPUT": plain, "DTYPE": case.dtype,
    }
    constants = "\n".join(f"{k} = {v!r}" for k, v in literals.items())
    words = ", ".join(f"{p} {placing.words(pl)}" for p, pl in placed.items())
    header = [
        f"# torchsleuth repro for finding {finding.id} ({finding.kind}, reference {finding.reference})",
        "#",
        f"#   op         {case.op}{' backward' if backward else ''}, {case.dtype}, mesh {mesh.name} ({mesh.ranks} ranks)",
        f"#   placements {words}",
        f"#   finding    {' '.join(finding.summary.split())}",
        f"#   found with torch {torch.__version__}, torchsleuth {__version__}; case {finding.case_id}",
        "#",
        f"# Simulated (LocalTensorMode, one process):   python {finding.id}.py   (where the simulator cannot check it, or "
        f"before torch 2.10, it starts {mesh.ranks} gloo processes itself)",
        f"# Real process groups (gloo on the CPU):       torchrun --nproc-per-node {mesh.ranks} {finding.id}.py",
        f"# Real process groups (NCCL on {mesh.ranks} GPUs):         TORCHSLEUTH_DEVICE=cuda torchrun --nproc-per-node {mesh.ranks} {finding.id}.py",
        "# Exit status: 1 while the bug is present, 0 once it is gone, 2 when it cannot be checked.",
        "",
        "import base64, io, os, sys, zlib",
        *PREAMBLE,
        constants,
        f"TENSORS = torch.load(io.BytesIO(zlib.decompress(base64.b85decode({_tensors_blob(tensors)!r}))))",
        *ending(function, args_src, kwargs_src),
    ]
    return "\n".join(header) + _MAIN


# After a script's header and its own imports: torch and DTensor's names, on every torch from 2.4.
PREAMBLE = [
    "import torch",
    "import torch.distributed as dist",
    "try:",
    "    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor",
    "except ImportError:  # torch 2.4: DTensor is torch.distributed._tensor",
    "    from torch.distributed._tensor import DTensor, Partial, Replicate, Shard, distribute_tensor",
    "",
]


def ending(function: str, args_src: str, kwargs_src: str) -> list[str]:
    """The lines before ``_MAIN``: ``call(T)`` (``function`` called with the arguments' source) and split.py's ``share``."""
    return ["", "", "def call(T):", f"    return {function}({args_src}{', ' if args_src and kwargs_src else ''}{kwargs_src})", "", "",
            inspect.getsource(split._pattern), "", inspect.getsource(split.share)]


def _opinfo_source(op: str) -> str:
    """The source that finds OpInfo's callable of ``op`` by its name and variant (an index into ``op_db`` differs
    between torch releases)."""
    from ..cases import opinfo

    target = opinfo.get(op)
    key = (target.name, getattr(target, "variant_test_name", ""))
    return ("next(o for o in __import__('torch.testing._internal.common_methods_invocations', fromlist=['op_db']).op_db "
            f"if (o.name, o.variant_test_name) == {key!r}).op")


def _unrepresentable(finding: Finding, why: str) -> str:
    return (f"# torchsleuth finding {finding.id}: {' '.join(finding.summary.split())}\n"
            f"# No standalone script: {why}. Replay it with `torchsleuth shard --ops {Case.parse(finding.case_id).op}`.\n"
            "import sys\nsys.exit(2)\n")


_MAIN = '''

def placements(text):
    try:
        from torch.distributed.tensor.placement_types import _StridedShard
    except ImportError:  # torch 2.4 (which has no _StridedShard: such a case was not planned there)
        _StridedShard = None
    found = []
    for part in text.split("."):
        if part == "R":
            found.append(Replicate())
        elif part.startswith("SS"):
            dim, split = part[2:].split("x")
            found.append(_StridedShard(int(dim), split_factor=int(split)))
        elif part.startswith("S"):
            found.append(Shard(int(part[1:])))
        else:
            found.append(Partial(part[1:]))
    return found


def coordinate(rank):
    found = []
    for size in reversed(MESH):
        found.append(rank % size)
        rank //= size
    return tuple(reversed(found))


def results(T):
    """Every output, and with GRAD_PATHS every gradient for seeded output gradients."""
    out = call(T)
    leaves = out if isinstance(out, (list, tuple)) else [out]
    found = {f"out[{i}]" if len(leaves) > 1 else "out": v for i, v in enumerate(leaves) if v is not None}  # None: not asked for
    if GRAD_PATHS:
        outs = [v for v in leaves if isinstance(v, torch.Tensor) and v.requires_grad]
        generator = torch.Generator().manual_seed(1234)
        grads = []
        for o in outs:
            g = torch.randn(tuple(int(s) for s in o.shape), generator=generator, dtype=torch.float64).to(o.dtype)
            if isinstance(o, DTensor):
                g = distribute_tensor(g.to(o.device), o.device_mesh, [Replicate()] * o.device_mesh.ndim)
            grads.append(g)
        for path, g in zip(GRAD_PATHS, torch.autograd.grad(outs, [T[p] for p in GRAD_PATHS], grads, allow_unused=True)):
            if g is not None:
                found[f"grad[{path}]"] = g
    return found


def spawned(ranks, why=""):
    """This script on `ranks` gloo processes of its own, as torchrun would run it: 1 if any rank sees the bug."""
    import subprocess
    import tempfile
    why = why or f"torch {torch.__version__} has no LocalTensorMode"
    print(f"{why}: running on {ranks} gloo processes", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "WORLD_SIZE": str(ranks), "TORCHSLEUTH_STORE": f"file://{folder}/store"}
        children = [subprocess.Popen([sys.executable, os.path.abspath(__file__)], env={**env, "RANK": str(r)}) for r in range(ranks)]
        try:
            codes = [child.wait(timeout=600) for child in children]
        except subprocess.TimeoutExpired:
            for child in children:
                child.kill()
            print("cannot check: the gloo processes did not finish in 600 s")
            return 2
    return 1 if 1 in codes else 0 if not any(codes) else 2


def main():
    device = os.environ.get("TORCHSLEUTH_DEVICE", "cpu")
    real = "WORLD_SIZE" in os.environ
    ranks = 1
    for size in MESH:
        ranks *= size
    # a copy: on the CPU .to(device) is the very tensor, which must not require grad when it is placed
    plain_T = {p: t.to(device).clone().requires_grad_(p in GRAD_PATHS) for p, t in TENSORS.items()}
    expected = {p: v.detach().cpu() for p, v in results(plain_T).items()} if KIND != "roundtrip_mismatch" else {
        p: t.detach().cpu() for p, t in TENSORS.items()}
    from torch.distributed.device_mesh import DeviceMesh
    if real:
        # torchrun's env://, or the file store of the processes spawned() starts
        dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=os.environ.get("TORCHSLEUTH_STORE", "env://"),
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        if device == "cuda":
            torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
            device = f"cuda:{torch.cuda.current_device()}"
        mode, rank_ids = None, [dist.get_rank()]
    else:
        try:
            from torch.distributed._local_tensor import LocalTensorMode
        except ImportError:  # before torch 2.10 there is no simulator: real gloo processes instead
            return spawned(ranks)
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=ranks, store=FakeStore())
        mode, rank_ids = LocalTensorMode(frozenset(range(ranks))), list(range(ranks))
    with mode if mode is not None else __import__("contextlib").nullcontext():
        mesh = DeviceMesh(torch.device(device).type, torch.arange(ranks).reshape(MESH))
        D = {}
        for path, t in TENSORS.items():
            wanted = placements(PLACEMENTS[path])
            source = t.to(device)
            if mode is not None and not PLAIN_INPUT:
                source = mode.rank_map(lambda r: t.clone())  # as torchsleuth's simulator places inputs
            dt = distribute_tensor(source, mesh, [Replicate() if isinstance(p, Partial) else p for p in wanted])
            partial = [(d, p.reduce_op) for d, p in enumerate(wanted) if isinstance(p, Partial)]
            if partial:
                def change(coord, value):
                    for d, reduce in partial:
                        value = share(value, reduce, coord[d], MESH[d])
                    return value
                local = dt.to_local()
                if mode is not None:
                    local = mode.rank_map(lambda r: change(coordinate(r), local._local_tensors[r] if hasattr(local, "_local_tensors") else local))
                else:
                    local = change(coordinate(dist.get_rank()), local)
                dt = DTensor.from_local(local, mesh, wanted, run_check=False, shape=t.shape, stride=t.stride())
            D[path] = dt.detach().requires_grad_(path in GRAD_PATHS)
        if KIND == "roundtrip_mismatch":
            got = {p: dt.full_tensor() for p, dt in D.items()}
        else:
            got = {}
            for p, v in results(D).items():
                try:
                    got[p] = v.full_tensor() if isinstance(v, DTensor) else v
                except Exception as e:  # the op ran, but its claimed placements do not reconstruct its local values
                    got[p] = f"full_tensor() through the claimed placements {v.placements} raises {type(e).__name__}: {e}"
        per_rank = {}
        for path, value in got.items():
            if hasattr(value, "_local_tensors"):
                per_rank[path] = {r: value._local_tensors[r].detach().cpu() for r in rank_ids}
            elif isinstance(value, torch.Tensor):
                per_rank[path] = {r: value.detach().cpu() for r in rank_ids}
            else:
                per_rank[path] = {r: value for r in rank_ids}
    wrong = False
    for path, e in expected.items():
        for rank, a in per_rank.get(path, {}).items():
            if isinstance(a, str):
                bad = True
                print(f"{path} rank {rank}: {a}")
            elif not isinstance(e, torch.Tensor):
                bad = a != e
                print(f"{path} rank {rank}: expected {e!r}, got {a!r}")
            elif a.shape != e.shape:
                bad = True
                print(f"{path} rank {rank}: shape {list(a.shape)}, the single-device answer has {list(e.shape)}")
            else:
                a64, e64 = a.to(torch.float64), e.to(torch.float64)
                eps = torch.finfo(e.dtype).eps if e.is_floating_point() else 0.0
                allowed = 1e-5 + 1.3e-6 * e64.abs() + 64 * eps * (e64.abs().max() if e.numel() else 0)
                diff = (a64 - e64).abs()
                # equal (infinities too), both NaN, or within the allowance; a NaN against a number is wrong
                close = (a64 == e64) | (a64.isnan() & e64.isnan()) | (diff <= allowed)
                bad = bool((~close).any())
                if bad:
                    worst = int(torch.where(close, -1.0, torch.nan_to_num(diff - allowed, nan=float("inf"))).reshape(-1).argmax())
                    print(f"{path} rank {rank}: WRONG at flat index {worst}: sharded {a64.reshape(-1)[worst].item():.6g}, "
                          f"single-device {e64.reshape(-1)[worst].item():.6g}; {int((~close).sum())} of {e.numel()} elements differ")
                    print("  sharded (full_tensor):", a.reshape(-1)[:8].tolist())
                    print("  single-device answer: ", e.reshape(-1)[:8].tolist())
            wrong = wrong or bool(bad)
    where = "real process groups" if real else "LocalTensorMode"
    print(f"BUG PRESENT ({where}): {FINDING}" if wrong else f"fixed ({where}): every rank's full_tensor() matches the single-device answer")
    if real:
        dist.destroy_process_group()
    code = 1 if wrong else 0
    if not real and globals().get("ALSO_GLOO"):  # checked simulated; now on real gloo processes as well
        gloo = spawned(ranks, "checked under LocalTensorMode; now on real process groups too")
        code = 1 if 1 in (code, gloo) else max(code, gloo)
    return code


if __name__ == "__main__":
    try:
        code = main()
    except Exception as e:
        if "WORLD_SIZE" in os.environ:
            print(f"cannot check: {type(e).__name__}: {e}")
            code = 2
        else:  # the simulator refused (ranks reading different numbers, say): real ranks of its own instead
            ranks = 1
            for size in MESH:
                ranks *= size
            words = " ".join(str(e).split())[:200]
            code = spawned(ranks, f"LocalTensorMode cannot check it ({type(e).__name__}: {words})")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # a gloo rank's C++ teardown at interpreter exit can abort it after its work is done
'''
