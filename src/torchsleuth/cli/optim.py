"""``torchsleuth optim``: do all optimizer implementations agree, on every parameter layout and dtype?"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ExitCode, UsageError
from .arguments import command, imports as load

EPILOG = """\
what it does:
  Runs every optimizer in torch.optim for a few steps (--steps, default 5)
  from seeded parameters and gradients, in every implementation it has
  (forloop: foreach=False; foreach; fused), each option toggled alone from
  the defaults (amsgrad, maximize, capturable, weight_decay, momentum,
  nesterov, ...; read from each constructor's signature), in every dtype
  and parameter layout, and judges the parameters and optimizer state after
  the last step. Optimizers and their options are discovered from torch at
  run time; one that cannot run here is skipped with torch's own reason
  (SparseAdam takes sparse gradients only), as is an implementation the
  device or dtype lacks (fused without a kernel, capturable on the CPU).

layouts (--layouts; default all): the parameters are a 2-D weight, a 1-D
bias and a 4-D conv weight; optimizer state made by zeros_like inherits
their layout, as in the seed story.
  contiguous     row-major
  transposed     the weight and conv weight transposed in their last two dims
  sliced         every parameter a view of every other element of a wider buffer
  channels_last  the conv weight in channels_last
  Gaps and a guard after every view hold a poison value: a kernel that
  writes outside the view is an out_of_view_write.

references:
  layout     every configuration against the for-loop run on contiguous
             parameters in the same dtype on the same device (tight: rounding
             at that precision only)
  precision  that for-loop run against the for-loop run in float64 on the
             CPU (loose: how far rounding to the dtype can carry it, measured
             by an emulated run); when it fails, the others of its dtype are
             judged against float64 instead
  A parameter left at its initial value where the reference moves it is a
  dropped_write; other differences beyond the allowance are mismatches.

examples:
  torchsleuth optim                                   # every optimizer: 10 to 30 s on 2 CPU cores
  torchsleuth optim --optimizers Adam,SGD --dtypes float32,bfloat16
  torchsleuth optim --device cuda --impls foreach,fused --json optim.json
  torchsleuth optim --optimizers Adam --layouts transposed --options default,amsgrad
  torchsleuth optim --import my_backend.py --device my_device
"""


def add_parser(commands) -> None:
    from ..optim import DEFAULT_DTYPES, DTYPES, IMPLEMENTATIONS, LAYOUTS
    from ..optim.matrix import DEFAULT_STEPS

    p = command(commands, "optim", "run every optimizer's implementations over parameter layouts and dtypes, judged "
                "against the for-loop and float64 runs", __doc__, EPILOG)
    p.add_argument("--optimizers", metavar="NAMES",
                   help="optimizer class names, comma-separated (Adam,SGD); default: every one in torch.optim")
    p.add_argument("--device", default="cpu", help="device to test: cpu, cuda, cuda:1, mps, ... (default: cpu)")
    p.add_argument("--dtypes", metavar="LIST",
                   help=f"dtypes, comma-separated, from {', '.join(DTYPES)} (default {','.join(DEFAULT_DTYPES)})")
    p.add_argument("--layouts", metavar="LIST", help=f"parameter layouts, comma-separated: {', '.join(LAYOUTS)} (default all)")
    p.add_argument("--impls", metavar="LIST", help=f"implementations, comma-separated: {', '.join(IMPLEMENTATIONS)} (default all)")
    p.add_argument("--options", metavar="LIST", help="options, comma-separated ('default' is no option; e.g. default,amsgrad); default all")
    p.add_argument("--steps", type=_steps, default=DEFAULT_STEPS, metavar="N", help=f"optimizer steps per run (default {DEFAULT_STEPS})")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="module or .py file imported first, e.g. to register kernels or a backend (repeatable); "
                        "optim runs in this process, so what it plants is in effect")
    p.add_argument("--out", default="torchsleuth-out", metavar="DIR", help="where repro scripts go (default ./torchsleuth-out)")
    p.add_argument("--db", metavar="PATH", help="SQLite file of runs, outcomes and findings (default DIR/runs.db); "
                   "rerunning the same command resumes an unfinished run")
    p.add_argument("--json", metavar="PATH", help="write the findings file (DESIGN.md's schema, command \"optim\") to PATH")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")
    p.set_defaults(run=run)


def _steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def run(args) -> int:
    from .. import devices
    from ..cases.select import resolve_names
    from ..optim import DEFAULT_DTYPES, DTYPES, IMPLEMENTATIONS, LAYOUTS, OptimConfig, matrix
    from ..optim.sweep import sweep
    from ..report import outputs, terminal

    # the cheap checks first, so that a typo is reported before anything runs
    dtypes = _dtypes(args.dtypes, DTYPES, DEFAULT_DTYPES)
    layouts = resolve_names(args.layouts, LAYOUTS, "layout", LAYOUTS)
    implementations = resolve_names(args.impls, IMPLEMENTATIONS, "implementation", IMPLEMENTATIONS)
    device = devices.parse(args.device)
    out = Path(args.out)
    outputs.check(out=out, json=args.json)
    optimizers = resolve_names(args.optimizers, matrix.names(), "optimizer", ())
    imports = load(args.imports)
    specs = matrix.discover(optimizers)
    options = resolve_names(args.options, matrix.option_names(specs), "option", ())
    config = OptimConfig(device=device, optimizers=optimizers, implementations=implementations, dtypes=dtypes,
                         layouts=layouts, options=options, steps=args.steps, imports=imports)
    if not [c for c in matrix.plan(specs, config) if not c.skip]:
        raise UsageError("nothing to run: no selected optimizer has the selected implementations and options "
                         f"({', '.join(implementations)}; {', '.join(options) or 'every option'})")
    result = sweep(config, db=args.db or str(out / "runs.db"), progress=Progress(enabled=not args.no_progress), out=out, json=args.json)
    terminal.summary(result, written=result.written)
    return ExitCode.FINDINGS if result.findings else ExitCode.CLEAN


def _dtypes(text: str | None, allowed: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
    from .. import dtypes as dtype_names

    if text is None or not text.strip():
        return default
    chosen = []
    for name in (part.strip() for part in text.split(",") if part.strip()):
        name = dtype_names.name(dtype_names.parse(name))  # aliases (half, bf16 is not one) and unknown names
        if name not in allowed:
            raise UsageError(f"dtype {name!r} is not one optimizers are judged in; allowed: {', '.join(allowed)}")
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


class Progress:
    """A rich progress bar over configurations (a ``sweep.Progress``: an optim run's units are its configurations), on stderr."""

    def __init__(self, *, enabled: bool = True):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = enabled
        self.findings = 0
        self._bar = None
        self._task = None

    def start(self, *, units: int, done: int, resumed: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        if resumed:
            self.console.print(f"[bold]resuming[/] the unfinished run: {done} of {units} configurations already done")
        if not self.enabled:
            return
        self._bar = Bar(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("configurations"),
            TextColumn("[red]{task.fields[findings]} findings"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=self.console,
        )
        self._bar.start()
        self._task = self._bar.add_task("optim".ljust(28), total=units, completed=done, findings=0)

    def outcome(self, outcome) -> None:
        self.findings += len(outcome.findings)
        if self._bar is not None:
            case = outcome.case
            what = f"{case.op} {case.variant} {case.dtype}"
            self._bar.update(self._task, advance=1, findings=self.findings, description=what[:28].ljust(28))

    def unit_done(self, unit) -> None:
        pass  # the bar moves on each configuration's outcome

    def step(self, name: str, done: int, total: int) -> None:
        pass  # an optim run has no stage after its configurations

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description="done".ljust(28))
            self._bar.stop()
