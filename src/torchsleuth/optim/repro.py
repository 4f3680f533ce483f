"""Repro scripts for optimizer findings: standalone, needing only torch.

Design note. A script is the header (what was found, how to run it), then
``optim/core.py`` verbatim (the code the sweep ran: parameters, layouts,
seeded gradients, the steps, the allowance rule), then the configuration as
literals and a ``main`` that runs it and its reference and judges them as
``optim.judge`` did: every parameter and state tensor against the same
allowance, or, for a write outside a view, the poison around each
parameter. A contract's script checks the contract instead: no parameter
moved and the state is finite (lr=0, zero gradients), or the run with
tensors against the same run with numbers (the tensor form). The optimizer
is rebuilt with the finding's hyperparameters, read back from the setting's
name in the case id (edges.parse), tensors included (``core.AsTensor``);
a contract's script tries up to ``TRIES`` runs, since a kernel that reads
memory it never wrote breaks a contract in some runs only. It prints the
worst elements of both runs and the difference, and exits 1 while the bug
is present, 0 once it is gone, 2 when the configuration cannot be run (it
raises now). The ``--import`` modules of the run (a planted kernel, a
custom backend) are imported first, as the sweep imported them.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Iterable

import torch

from .._version import __version__
from ..cases.records import Case
from ..dtypes import name as dtype_name
from ..judge.records import Finding
from ..judge.tolerance import PRECISION_MARGIN, SLACK, TABLE
from . import core, edges
from .judge import LAYOUT_FACTOR
from .matrix import ZERO_EDIT, Configuration, OptimConfig, OptimSpec, kwargs


# Runs a contract's script makes before it says the contract holds: a kernel that reads memory it never
# wrote (fused SGD's momentum buffer in float16 on the CPU) breaks it in a share of runs only.
TRIES = 100


def configuration_of(finding: Finding, spec: OptimSpec) -> Configuration:
    """The configuration a finding's case id names."""
    case = Case.parse(finding.case_id)
    option = next((e.removeprefix("option:") for e in case.edits if e.startswith("option:")), "default")
    return Configuration(optimizer=case.op, implementation=case.variant, dtype=case.dtype, device=case.device,
                         layout=case.layout_of("param"), option=edges.parse(spec, option), zero=ZERO_EDIT in case.edits)


def contract_of(finding: Finding, configuration: Configuration) -> str:
    """Which contract a finding breaks ("" for a reference's finding or a write outside a view)."""
    if finding.reference != "contract" or finding.kind == "out_of_view_write":
        return ""
    if finding.kind == "invariant":
        return "zero_gradient" if configuration.zero else "lr_zero"
    return "tensor_form"


def write_scripts(findings: Iterable[Finding], specs: dict[str, OptimSpec], config: OptimConfig, out: str | Path) -> dict[str, Path]:
    """Each finding's script as ``out/repros/<id>.py``; finding id -> path."""
    folder = Path(out) / "repros"
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for finding in findings:
        path = folder / f"{finding.id}.py"
        path.write_text(script(finding, specs[finding.opinfo], config), encoding="utf-8")
        written[finding.id] = path
    return written


def script(finding: Finding, spec: OptimSpec, config: OptimConfig) -> str:
    configuration = configuration_of(finding, spec)
    contract = contract_of(finding, configuration)
    plain = edges.number_form(spec, configuration.option) if contract == "tensor_form" else None
    tables = {dtype_name(d): v for d, v in TABLE.items() if d.is_floating_point}
    literals = {
        "FINDING": finding.id,
        "SUMMARY": " ".join(finding.summary.split()),
        "KIND": finding.kind,
        "REFERENCE": finding.reference,
        "PATH": finding.mismatch.path if finding.mismatch else "",
        "OPTIMIZER": spec.name,
        "KWARGS": kwargs(spec, configuration.implementation, configuration.option),
        "BASELINE_KWARGS": kwargs(spec, "forloop", plain or configuration.option),
        "EXACT_KWARGS": kwargs(spec, "forloop", configuration.option, reference=True),
        "LAYOUT": configuration.layout,
        "DTYPE": configuration.dtype,
        "DEVICE": configuration.device,
        "STEPS": config.steps,
        "ZERO": configuration.zero,
        "CONTRACT": contract,
        "TRIES": TRIES if contract in ("lr_zero", "zero_gradient") else 1,
        "SEED": config.seed,
        "NAMES": tuple(spec.params),
        "CLOSURE": spec.closure,
        "TOLERANCES": tables,
        "SLACK": SLACK,
        "FACTOR": PRECISION_MARGIN if finding.reference == "precision" else LAYOUT_FACTOR,
        "IMPORTS": tuple(config.imports),
    }
    constants = "\n".join(f"{name} = {value!r}" for name, value in literals.items())
    mismatch = finding.mismatch.describe() if finding.mismatch else ""
    header = [
        f"# torchsleuth repro for finding {finding.id}",
        "#",
        f"#   optimizer  torch.optim.{spec.name}, {configuration.implementation} implementation, {configuration.layout} parameters,",
        f"#              {configuration.dtype} on {configuration.device}, option {configuration.option.name}, {config.steps} steps"
        + (", every gradient zero" if configuration.zero else ""),
        f"#   arguments  {kwargs(spec, configuration.implementation, configuration.option)!r}",
        f"#   kind       {finding.kind}, judged against the {finding.reference} reference",
        f"#   finding    {_one_line(finding.summary)}",
    ]
    if mismatch:
        header.append(f"#   mismatch   {_one_line(mismatch)}")
    header += [
        f"#   found with torch {torch.__version__}, torchsleuth {__version__}",
        f"#   case       {finding.case_id}",
        "#",
        f"# Run it with the torch under test:  python {finding.id}.py",
        "# Exit status: 1 while the bug is present, 0 once it is gone, 2 when it cannot be checked.",
        "# It needs only torch. What follows first is torchsleuth/optim/core.py verbatim: the",
        "# parameters, their layouts, the seeded gradients, the steps and the allowance rule.",
        "",
    ]
    return "\n".join(header) + inspect.getsource(core) + _MAIN.format(constants=constants)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


_MAIN = '''

# --- this finding ------------------------------------------------------------------

import importlib
import runpy
import sys
import traceback

{constants}


def run(arguments, **how):
    how.setdefault("zero", ZERO)
    return trajectory(getattr(torch.optim, OPTIMIZER), dict(arguments), steps=STEPS, seed=SEED, names=NAMES, closure=CLOSURE, **how)


def show(path, actual, expected, allowed, bad):
    a, e = actual.to(torch.float64).reshape(-1), expected.to(torch.float64).reshape(-1)
    excess = torch.where(bad.reshape(-1), (a - e).abs() / allowed.reshape(-1), torch.zeros_like(a)).nan_to_num(nan=float("inf"))
    worst = excess.argsort(descending=True)[: min(4, int(bad.sum()))]
    print(f"  {{path}}: {{int(bad.sum())}} of {{a.numel()}} elements beyond the allowance")
    for i in worst.tolist():
        at = [int(j) for j in torch.unravel_index(torch.tensor(i), actual.shape)]
        print(f"    {{path}}{{at}}: expected {{e[i].item():.6g}}, got {{a[i].item():.6g}}, "
              f"difference {{(a[i] - e[i]).abs().item():.3g}}, allowed {{allowed.reshape(-1)[i].item():.3g}}")


def main():
    kept = [runpy.run_path(name) if name.endswith(".py") else importlib.import_module(name) for name in IMPORTS]  # noqa: F841 (keeps plants alive)
    dtype = getattr(torch, DTYPE)
    try:
        actual = run(KWARGS, layout=LAYOUT, dtype=dtype, device=DEVICE)
    except Exception:
        traceback.print_exc()
        print("cannot check: the configuration raises now", file=sys.stderr)
        return 2
    print(SUMMARY)
    print(f"torch {{torch.__version__}}: {{OPTIMIZER}} {{KWARGS}} on {{LAYOUT}} {{DTYPE}} parameters on {{DEVICE}}, {{STEPS}} steps")
    if CONTRACT in ("lr_zero", "zero_gradient"):
        finite = None
        if CONTRACT == "lr_zero":  # the state must stay finite where float64, rounded to the dtype at every op, does
            exact = run(EXACT_KWARGS, layout="contiguous", dtype=torch.float64, device="cpu", values_dtype=dtype)
            emulated = run(EXACT_KWARGS, layout="contiguous", dtype=torch.float64, device="cpu", values_dtype=dtype, mode=Rounded(dtype))
            finite = {{path: torch.isfinite(value) & torch.isfinite(emulated.final[path].to(torch.float64) - value.to(torch.float64))
                      for path, value in exact.final.items()
                      if value.is_floating_point() and path in emulated.final and emulated.final[path].shape == value.shape}}
        broken, tries = unkept(actual, finite=finite), 1
        while not broken and tries < TRIES:  # a kernel that reads memory it never wrote breaks it only sometimes
            actual, tries = run(KWARGS, layout=LAYOUT, dtype=dtype, device=DEVICE), tries + 1
            broken = unkept(actual, finite=finite)
        print(f"{{'broken in run ' + str(tries) if broken else 'kept in every run'}} of up to {{TRIES}}")
        for line in broken:
            print(f"  {{line}}")
        what = "lr=0" if CONTRACT == "lr_zero" else "every gradient zero"
        print(f"BUG PRESENT: with {{what}} a parameter moved or the state is not finite" if broken
              else "fixed: no parameter moved and the state is finite")
        return 1 if broken else 0
    if REFERENCE == "contract" and not CONTRACT:
        changed = {{name: n for name, n in actual.outside.items() if n}}
        for name, (shape, stride, offset, storage) in actual.layouts.items():
            print(f"  {{name}}: shape {{list(shape)}}, stride {{list(stride)}}: {{actual.outside[name]}} element(s) outside the view changed")
        print("BUG PRESENT: writes outside a parameter's view" if changed else "fixed: nothing outside any view changed")
        return 1 if changed else 0
    exact = run(EXACT_KWARGS, layout="contiguous", dtype=torch.float64, device="cpu", values_dtype=dtype)
    mode = Rounded(dtype)
    emulated = run(EXACT_KWARGS, layout="contiguous", dtype=torch.float64, device="cpu", values_dtype=dtype, mode=mode)
    if REFERENCE == "layout" or CONTRACT == "tensor_form":
        expected = run(BASELINE_KWARGS, layout="contiguous", dtype=dtype, device=DEVICE)
        print(f"reference: the for-loop implementation {{BASELINE_KWARGS}} on contiguous {{DTYPE}} parameters on {{DEVICE}}")
    else:
        expected = exact
        print("reference: the for-loop implementation in float64 on the CPU")
    lowest = max(torch.finfo(dtype).eps, torch.finfo(mode.lowest).eps) / 2
    order = sorted(actual.final, key=lambda path: path != PATH)
    wrong = []
    for path in order:
        value = actual.final[path]
        if path not in expected.final:
            continue
        e = expected.final[path]
        if value.shape != e.shape:
            print(f"  {{path}}: shape {{list(value.shape)}}, expected {{list(e.shape)}}")
            wrong.append(path)
            continue
        atol, rtol = TOLERANCES.get(str(value.dtype).removeprefix("torch."), TOLERANCES["float64"])
        k = (emulated.final[path].to(torch.float64) - exact.final[path].to(torch.float64)).abs() if (
            path in emulated.final and path in exact.final and emulated.final[path].shape == exact.final[path].shape == e.shape) else 0.0
        u = max(lowest, torch.finfo(value.dtype).eps / 2) if value.is_floating_point() else lowest
        allowed = allowance(e, expected.largest[path], expected.path[path], atol=atol, rtol=rtol, u=u, steps=STEPS,
                            factor=FACTOR, slack=SLACK, k=k)
        bad = beyond(value, e, allowed)
        if bool(bad.any()):
            wrong.append(path)
            show(path, value, e, allowed, bad)
            if path in actual.initial and bool((value.to(torch.float64)[bad] == actual.initial[path][bad]).all()):
                print(f"    every one of them still holds its initial value: {{path}} was never updated")
        elif path == PATH:
            print(f"  {{path}}: within the allowance (largest difference "
                  f"{{(value.to(torch.float64) - e.to(torch.float64)).abs().max().item():.3g}})")
    if wrong:
        print(f"BUG PRESENT: {{', '.join(wrong)}} beyond the allowance")
        return 1
    print("fixed: every parameter and state tensor within the allowance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
