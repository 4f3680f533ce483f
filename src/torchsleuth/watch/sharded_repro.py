"""Repro scripts of the DTensor calls ``watch`` found wrong: the single op on its placements, simulated and on gloo ranks.

Design note. A ``sharding_mismatch`` that watch.sharded found carries, in
its ``data``, the call as the program made it: the aten op, its arguments
as source (tensors written ``T["input"]``), the gathered full inputs
(compressed; drawn values of the same shapes and dtypes past
watch.sharded's size limit), each argument's placements and the mesh's
shape. The script is shard.repro's: the same ``main`` (single-device answer,
mesh built, every argument placed, the op called on DTensors,
``full_tensor()`` compared on every rank), with ``call(T)`` the aten op
itself and ``ALSO_GLOO`` set, so that ``python f-....py`` checks under
LocalTensorMode where this torch has it and then on gloo processes it
spawns, each verdict saying where it was found ("BUG PRESENT
(LocalTensorMode)", "BUG PRESENT (real process groups)"); under
``torchrun --nproc-per-node N`` it runs as one rank of N (NCCL with
``TORCHSLEUTH_DEVICE=cuda``). A ``parity_mismatch`` of ``watch --parity``
gets a script that runs the two watched runs again (``parity_script``: it
needs torchsleuth) and exits 1 while they part. The run's
``--import`` modules (kernels, sharding rules registered by the user) are
imported first, in every process. Every other finding gets the script
``report.repro`` writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch

from .._version import __version__
from ..judge.records import Finding
from ..report import repro as op_repro
from ..shard import placements as placing, repro as shard_repro


def writer(imports: tuple[str, ...] = ()):
    """The run frame's script writer: watch's DTensor findings here, every other one as report.repro writes it."""
    imports = resolved(imports)

    def write(findings: Iterable[Finding], out: Path) -> dict[str, Path]:
        findings = list(findings)
        ours = [f for f in findings if is_ours(f) or is_parity(f)]
        written = op_repro.write_scripts([f for f in findings if f not in ours], out, imports=imports)
        folder = Path(out) / "repros"
        folder.mkdir(parents=True, exist_ok=True)
        for finding in ours:
            path = folder / f"{finding.id}.py"
            path.write_text(parity_script(finding) if is_parity(finding) else script(finding, imports), encoding="utf-8")
            written[finding.id] = path
        return written

    return write


def resolved(imports: tuple[str, ...]) -> tuple[str, ...]:
    """The ``--import`` modules as a script anywhere finds them: a ``.py`` file by its absolute path."""
    return tuple(str(Path(m).resolve()) if m.endswith(".py") else m for m in imports)


def is_ours(finding: Finding) -> bool:
    return finding.kind == "sharding_mismatch" and finding.data.startswith("{") and '"function"' in finding.data


def is_parity(finding: Finding) -> bool:
    return finding.kind == "parity_mismatch" and '"rerun"' in finding.data


def parity_script(finding: Finding) -> str:
    """A parity finding's script: the two runs compared again (``torchsleuth watch --nproc N --parity``, the shadow
    replay off), exit 1 while they part at some step, 0 once they agree."""
    data = json.loads(finding.data)["parity"]
    return "\n".join([
        f"# torchsleuth repro for finding {finding.id} (parity_mismatch, found by watch --parity)",
        "#",
        f"#   finding    {' '.join(finding.summary.split())}",
        f"#   found with torch {torch.__version__}, torchsleuth {__version__}",
        "#",
        f"# python {finding.id}.py: runs the script on 1 and {data['world']} ranks again (gloo; it needs torchsleuth, which",
        "#   starts them) and compares their steps. Exit status: 1 while the runs part, 0 once they agree, 2 when it",
        "#   cannot check (the script failed).",
        "",
        "import json, os, subprocess, sys, tempfile",
        "",
        f"RERUN = {data['rerun']!r}",
        "with tempfile.TemporaryDirectory() as folder:",
        "    found = os.path.join(folder, 'findings.json')",
        "    done = subprocess.run([sys.executable, '-m', 'torchsleuth', 'watch', '--out', folder, '--json', found, *RERUN],",
        "                          capture_output=True, text=True)",
        "    findings = json.load(open(found))['findings'] if os.path.exists(found) else None",
        "if findings is None or done.returncode not in (0, 1):",
        "    print(done.stdout[-4000:] + done.stderr[-4000:])",
        "    print(f'cannot check: the watched runs exited with status {done.returncode}')",
        "    sys.exit(2)",
        "apart = [f['summary'] for f in findings if f['kind'] == 'parity_mismatch']",
        "print(*apart, sep='\\n')",
        f"print('BUG PRESENT: the run on {data['world']} ranks parts from the run on one' if apart else "
        f"'fixed: the run on {data['world']} ranks agrees with the run on one')",
        "sys.exit(1 if apart else 0)",
        "",
    ])


def script(finding: Finding, imports: tuple[str, ...] = ()) -> str:
    data = json.loads(finding.data)
    args_src, kwargs_src, why = (data["call"] + [""])[:3]
    if why:
        return (f"# torchsleuth finding {finding.id}: {' '.join(finding.summary.split())}\n"
                f"# No standalone script: an argument has no Python source ({why}).\nimport sys\nsys.exit(2)\n")
    mesh = tuple(data["mesh"])
    ranks = 1
    for size in mesh:
        ranks *= size
    placements = {p: data["placements"].get(p, ".".join("R" * len(mesh))) for p in data["shapes"]}
    literals = {"FINDING": finding.id, "KIND": finding.kind, "MESH": mesh, "PLACEMENTS": placements, "GRAD_PATHS": [],
                "PLAIN_INPUT": False, "DTYPE": finding.dtype, "ALSO_GLOO": True, "IMPORTS": list(imports),
                "SHAPES": data["shapes"], "DTYPES": data["dtypes"]}
    words = ", ".join(f"{p} {placing.words(pl)}" for p, pl in placements.items())
    claimed = ", ".join(f"{p} {placing.words(pl)}" for p, pl in data["claimed"].items()) or "-"
    tensors = (f"TENSORS = torch.load(io.BytesIO(zlib.decompress(base64.b85decode({data['tensors']!r}))))" if data["tensors"]
               else "TENSORS = drawn()  # the program's tensors were too large to carry: values of the same shapes")
    lines = [
        f"# torchsleuth repro for finding {finding.id} ({finding.kind}, found by watch at step {data['step']})",
        "#",
        f"#   op         {finding.op}, {finding.dtype}, mesh {'x'.join(map(str, mesh))} ({ranks} ranks)",
        f"#   placements {words}; the rule claimed {claimed}",
        f"#   module     {data['module'] or '-'}; stack {data['stack'] or '-'}",
        f"#   finding    {' '.join(finding.summary.split())}",
        f"#   found with torch {torch.__version__}, torchsleuth {__version__}",
        "#",
        f"# python {finding.id}.py: checks under LocalTensorMode (one process; torch 2.10 and later), then on {ranks} gloo",
        "#   processes it starts itself, and says where each verdict was found.",
        f"# Real process groups only:  torchrun --nproc-per-node {ranks} {finding.id}.py   (NCCL: TORCHSLEUTH_DEVICE=cuda)",
        *([f"# Found on {finding.device}: by default this checks on the CPU (a rule bug is the device's too, a kernel's "
           "may not be);", f"#   on the GPUs: TORCHSLEUTH_DEVICE=cuda torchrun --nproc-per-node {ranks} {finding.id}.py"]
          if finding.device.startswith("cuda") else []),
        "# Exit status: 1 while the bug is present, 0 once it is gone, 2 when it cannot be checked.",
        "",
        "import base64, importlib, io, os, runpy, sys, zlib",
        *shard_repro.PREAMBLE,
        "\n".join(f"{k} = {v!r}" for k, v in literals.items()),
        "for _module in IMPORTS:  # the run's --import modules: the kernels and rules it ran with",
        "    runpy.run_path(_module) if _module.endswith('.py') else importlib.import_module(_module)",
        "",
        "",
        "def drawn():",
        "    generator = torch.Generator().manual_seed(0)",
        "    found = {}",
        "    for path, shape in SHAPES.items():",
        "        dtype = getattr(torch, DTYPES[path])",
        "        if dtype.is_floating_point:",
        "            found[path] = torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)",
        "        else:",
        "            found[path] = torch.randint(0, 4, shape, generator=generator).to(dtype)",
        "    return found",
        "",
        "",
        tensors,
        "",
        "",
        "def number_as_tensor(value):",
        '    """A Python number the op returns (item()), as a tensor: compared as every other result."""',
        "    return torch.tensor(value) if isinstance(value, (bool, int, float)) else value",
        *shard_repro.ending(f"(lambda *a, **k: number_as_tensor({data['function']}(*a, **k)))", args_src, kwargs_src),
    ]
    return "\n".join(lines) + shard_repro._MAIN
