"""``torchsleuth optim``: do all optimizer implementations agree, on every parameter layout, dtype and hyperparameter edge?"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ..errors import UsageError
from ..optim.matrix import CATALOG_BUDGET, POINTED_OPTIMIZERS
from .arguments import command, count, imports as load

EPILOG = f"""\
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

hyperparameter edges (on unless --no-edges): each numeric hyperparameter of
each constructor at the edges of its range, by a rule its name and default
give: rates in [0, 1] (betas, momentum, dampening, rho, alpha, etas) at 0, 1e-8,
0.5, 0.999, 0.9999, 1-1e-8 and 1; every other number (lr, eps, weight_decay, ...)
at 0, 1e-8, 10 and 1000; lr and betas also as 0-dim tensors where torch
documents a Tensor; the flags combined, with one edge value each and with
lr=0. A value the constructor refuses is not run (a note names it).
  contracts  lr=0 changes no parameter, bit for bit, and leaves the state
             finite (not Rprop: its steps are clamped at step_sizes[0]);
             with no weight decay a zero gradient changes no parameter and
             leaves the state finite (where eps is not 0 in the dtype); a
             tensor hyperparameter gives what the same number gives. A
             broken one is an invariant (or mismatch) finding, reference
             contract.
  depth      a run pointed at {POINTED_OPTIMIZERS} optimizers or fewer (--optimizers) takes every
             edge setting; a run over more samples --budget per optimizer
             (default {CATALOG_BUDGET}, the lr=0 setting first, seeded) and notes what it took.
  settings   --options names settings: an option (amsgrad, no_nesterov), a
             hyperparameter at a value (lr=0, betas[1]=0.9999), a tensor form
             (lr:tensor), joined by + (amsgrad+maximize+lr=0).

examples:
  torchsleuth optim                                   # every optimizer, edges sampled: 30-60 s on 2 CPU cores (bench/optim.md)
  torchsleuth optim --optimizers Adam                 # every edge and combination of Adam's hyperparameters
  torchsleuth optim --optimizers Adam --options 'lr=0,amsgrad+maximize+lr=0,lr=0+lr:tensor'
  torchsleuth optim --no-edges                        # the defaults and each option alone, no contracts
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
    p.add_argument("--options", metavar="LIST",
                   help="settings, comma-separated: 'default', an option (amsgrad), hyperparameters at values joined by + "
                        "(lr=0, betas[1]=0.9999+amsgrad, lr:tensor); default: every option and the edges (see below)")
    p.add_argument("--depth", choices=("auto", "deep", "catalog"), default="auto",
                   help=f"deep: every hyperparameter edge setting; catalog: --budget of them per optimizer; auto (default): "
                        f"deep when --optimizers names at most {POINTED_OPTIMIZERS}")
    p.add_argument("--budget", type=count, metavar="N",
                   help=f"edge settings per optimizer, a seeded sample (default {CATALOG_BUDGET} in a catalog run, "
                        f"every one in a pointed run; 0: every one)")
    p.add_argument("--no-edges", action="store_true",
                   help="no hyperparameter edges and no contracts: the defaults and each option alone")
    p.add_argument("--steps", type=_steps, default=DEFAULT_STEPS, metavar="N", help=f"optimizer steps per run (default {DEFAULT_STEPS})")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="module or .py file imported first, e.g. to register kernels or a backend (repeatable); "
                        "optim runs in this process, so what it plants is in effect")
    p.add_argument("--out", default="torchsleuth-out", metavar="DIR", help="where repro scripts go (default ./torchsleuth-out)")
    p.add_argument("--db", metavar="PATH", help="SQLite file of runs, outcomes and findings (default DIR/runs.db); "
                   "rerunning the same command resumes an unfinished run")
    p.add_argument("--json", metavar="PATH", help="write the findings file (docs/findings.md, command \"optim\") to PATH")
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
    from ..optim import DEFAULT_DTYPES, DTYPES, IMPLEMENTATIONS, LAYOUTS, OptimConfig, matrix, plan
    from ..optim.sweep import sweep
    from ..report import outputs
    from .ending import finish

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
    options = _settings(args.options, [s for s in specs if not s.skip])
    config = OptimConfig(device=device, optimizers=optimizers, implementations=implementations, dtypes=dtypes,
                         layouts=layouts, options=options, steps=args.steps, imports=imports, edges=not args.no_edges)
    deep = args.depth == "deep" or (args.depth == "auto" and args.optimizers is not None and len(optimizers) <= POINTED_OPTIMIZERS)
    config = plan.depth(config, deep=deep)
    if args.budget is not None:
        config = dataclasses.replace(config, budget=args.budget)
    _refused(options, [s for s in specs if not s.skip], config)
    if not [c for c in plan.plan(specs, config) if not c.skip]:
        raise UsageError("nothing to run: no selected optimizer has the selected implementations and options "
                         f"({', '.join(implementations)}; {', '.join(options) or 'every option'})")
    db = args.db or str(out / "runs.db")
    result = sweep(config, db=db, progress=Progress(enabled=not args.no_progress), out=out, json=args.json)
    return finish(result, db=db)


def _settings(text: str | None, specs) -> tuple[str, ...]:
    """The settings --options names, each one some selected optimizer has; else its error, one line."""
    from ..optim import edges

    if text is None or not text.strip():
        return ()
    chosen = []
    for name in (part.strip() for part in text.split(",") if part.strip()):
        errors = []
        for spec in specs:
            try:
                edges.parse(spec, name)
            except UsageError as e:
                errors.append(str(e))
        if specs and len(errors) == len(specs):
            # the most telling: a bad value, then a missing element, then an unknown hyperparameter or option
            ranked = sorted(errors, key=lambda e: [e.startswith("bad value"), "has no element" in e, e.startswith("unknown hyperparameter")],
                            reverse=True)
            raise UsageError(ranked[0] if len(specs) == 1 else f"no selected optimizer takes {name!r}: {ranked[0]}")
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


def _refused(names: tuple[str, ...], specs, config) -> None:
    """A setting named with --options that every selected optimizer having it refuses to construct: one line, exit 2."""
    from ..optim import edges, plan

    for name in names:
        reasons = []
        for spec in specs:
            try:
                option = edges.parse(spec, name)
            except UsageError:
                continue
            why = [plan.refusal(spec, option, i, config.device) for i in spec.implementations if i in config.implementations]
            if why and all(why):
                reasons.append(f"{spec.name} refuses {option.name}: {why[0]}")
            else:
                break
        else:
            if reasons:
                raise UsageError(f"bad value in --options {name!r}: {reasons[0]}")


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
