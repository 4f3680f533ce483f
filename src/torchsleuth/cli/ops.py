"""``torchsleuth ops``: sweep every op across layouts, variants, dtypes and devices."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from .. import config as config_module
from ..cases import layouts
from ..cases.records import DEFAULT_DTYPES, VARIANTS
from ..errors import ExitCode, UsageError
from ..judge.plugin import BUILTIN, family
from ..workers import ray_pool
from ..search import registry as search_registry
from ..run.deadline import SHARE
from ..sweep import CATALOG_BUDGET, CATALOG_REFUSALS, POINTED_OPS, POINTED_REFUSALS, POINTED_SECONDS, begin_workers, depth
from ..config import DEFAULT_SAMPLES, EXECUTORS, check_executor
from .arguments import budget, command, count, cpus, imports as load, seconds, time_target

EPILOG = f"""\
layouts (--layouts, comma-separated; default all):
{chr(10).join(f"  {name:<17} {text}" for name, text in layouts.DESCRIPTIONS.items())}

variants (--variants; default all): {", ".join(VARIANTS)}
  backward differentiates the functional call and compares the gradients.

dtypes (--dtypes; default {",".join(DEFAULT_DTYPES)}; "all" for every dtype)
  each op runs in the dtypes OpInfo declares for it on the device; with --probe-dtypes
  (the default of a deep run) also in the others, where its kernel takes them: the first
  sample's call is tried first, and a dtype the kernel refuses is one skip saying so.

references: every case is judged against the same call on contiguous tensors
(layout); the all-contiguous case also against float64 on the CPU (precision)
and, off the CPU, against the CPU (device). Contracts need no reference.

deeper oracles (--oracles; each adds its own cases to the sweep):
{chr(10).join(f"  {name:<17} {text}" for name, text in BUILTIN.available().items())}

searches (--search; calls OpInfo's samples never make, as edits of a sample):
{chr(10).join(f"  {name:<17} {text}" for name, text in search_registry.descriptions().items())}

depth (--depth): a run pointed at a few ops (--ops naming at most {POINTED_OPS}) goes deep:
every sample, every search with no budget, the cheap oracles
({", ".join(BUILTIN.of_cost("cheap"))}), the dtypes not declared probed (--probe-dtypes),
and, with the overloads search, every overload of the ops' packets no sample reaches, swept
from its schema (aten.norm.ScalarOpt_dim under norm).
Any other run is the catalog sweep: {DEFAULT_SAMPLES} samples per op and dtype, every search and a
sample of the cases of the oracles {", ".join(BUILTIN.sampled())} within --budget (default {CATALOG_BUDGET} searched
cases per op and dtype, spread over those planned; the summary says how many ran; --oracles none
leaves the sample out). --samples, --oracles,
--search, --budget and --(no-)probe-dtypes given explicitly win over the depth.
A pointed run also compiles a sample of its cases with torch.compile (inductor): at most
28 per op, an all-pairs cover of layout x dtype x variant, each judged like its eager case
(the compiled variant; the summary says so), and at most 12 chains of 2 to 4 ops around
each op (compiled chains); --compile adds every sample's contiguous call,
--no-compile (or --oracles given) leaves compiling out. A catalog run compiles only with --compile,
and then within its budget: 4 cases of the cover, 1 searched case and 1 chain per op, the cover's
share turned by the op so that the catalog walks all of it.
A pointed run aims to end within {POINTED_SECONDS:g} s (--time): its units are split among the workers
where they are fewer, and once {SHARE:.0%} of it is spent no more oracle or searched cases start
(every sample's own cases still run; the searched ones run in an order spread over the whole plan,
so the share that ran samples every search); the summary says how many were left out.
A pointed run on CUDA also runs the large oracle (--large): sizes past 2^23, 2^24, 2^31 and 2^32
elements as far as the GPU's free memory allows, each probe skipped, saying why, where it does not
fit; --large none (or --oracles given) leaves it out.

after the sweep every finding is replayed (one that does not recur is flaky,
not a bug), shrunk to its smallest failing case (the repro is written from
it), grouped by the arguments that trigger it, and each group diagnosed in
one sentence; --no-shrink skips this.

examples:
  torchsleuth ops                                  # the whole catalog on the CPU
  torchsleuth ops --ops 'add*,softmax' --dtypes float32,bfloat16
  torchsleuth ops --device cuda --json findings.json
  torchsleuth ops --junit results.xml              # for CI: a test case per op, variant and dtype
  torchsleuth ops --import my_kernels.py --ops my_op   # your own kernels, registered by torch.library
  torchsleuth ops --executor ray                   # on a local Ray instance (pip install 'torchsleuth[ray]')
  torchsleuth ops --executor ray --ray-address HEAD:6379   # on a Ray cluster (docs/scale.md)
"""


def add_parser(commands) -> None:
    p = command(commands, "ops", "sweep ops across layouts, variants, dtypes and devices", __doc__, EPILOG)
    p.add_argument("--ops", metavar="NAMES",
                   help="op names or globs, comma-separated ('add*,softmax'), as OpInfo names them ('nn.functional.gelu'; a bare "
                        "function name that matches none is told its catalog name); default: every op of the OpInfo catalog. "
                        "Ops beyond it are swept with samples generated from their schema: 'aten.NAME' is every overload "
                        "of that aten packet (aten.add: aten.add.Tensor, aten.add.Scalar), 'aten.NAME.OVERLOAD' one; a glob "
                        "over aten ('aten.*', 'aten.native_*') takes only overloads of packets no OpInfo entry sweeps; "
                        "a custom op as 'NS::NAME' or 'NS.*' once --import has registered it")
    p.add_argument("--device", help="device to test: cpu, cuda, cuda:1, mps, ... (default: cpu). On a machine with several GPUs, "
                   "cuda means all of them: the workers are spread over them, each pinned to one; cuda:1 runs every worker there")
    p.add_argument("--devices", metavar="LIST", help="the GPUs to spread the workers over, comma-separated (cuda:0,cuda:2); "
                   "each worker sees only its GPU, and the cases are those of --device cuda")
    p.add_argument("--dtypes", metavar="LIST", help="dtypes to test, comma-separated, or 'all'")
    p.add_argument("--layouts", metavar="LIST", help="layouts to test, comma-separated (see below)")
    p.add_argument("--variants", metavar="LIST", help="variants to test: functional, method, inplace, out, backward")
    p.add_argument("--probe-dtypes", action=argparse.BooleanOptionalAction, default=None,
                   help="also sweep each op in the --dtypes OpInfo does not declare for it, where its kernel takes them "
                        "(default: on in a deep run, off in a catalog one)")
    p.add_argument("--samples", type=count, metavar="N",
                   help=f"OpInfo samples per op and dtype, spread over its list, leaving out samples over 2^18 elements "
                        f"(default {config_module.DEFAULT_SAMPLES}, or every sample in a pointed run; 0: every sample)")
    p.add_argument("--depth", choices=("auto", "deep", "catalog"), default="auto",
                   help=f"deep: every sample, every search, the cheap oracles; catalog: a sample of each; auto (default): "
                        f"deep when --ops names at most {POINTED_OPS} ops")
    p.add_argument("--search", metavar="LIST",
                   help="searches beyond OpInfo's samples, comma-separated, 'all' or 'none' (see below; default all)")
    p.add_argument("--budget", type=budget, metavar="N|Ns",
                   help=f"searched cases per op and dtype: N cases, or Ns seconds, 0 for no limit "
                        f"(default {CATALOG_BUDGET} in a catalog run, none in a pointed one)")
    p.add_argument("--refusals", type=count, metavar="N",
                   help=f"on cuda: cases per op and dtype whose values the CPU refuses (an index out of range, a zero divisor) "
                        f"sent to the GPU after the sweep, each where a device-side assert costs no other case; one the GPU "
                        f"returns from without error is an unchecked_input finding (default {POINTED_REFUSALS} in a pointed "
                        f"run, {CATALOG_REFUSALS} in a catalog one; 0: none)")
    p.add_argument("--time", dest="time_target", type=time_target, metavar="SECONDS",
                   help=f"the time the run aims to end within: past {SHARE * 100:.0f}%% of it, no more oracle or searched cases start "
                        f"(every sample's own cases still run; the summary says how many were left out), the rest is for "
                        f"the refusals, shrinking and diagnosis, which end with it (a finding they cannot shrink in time is kept as "
                        f"found); 120, 120s, 2m; 0 or none: run them all "
                        f"(default {POINTED_SECONDS:g} s in a pointed run, none in a catalog one)")
    p.add_argument("--workers", type=count, metavar="N",
                   help="worker processes (default: one per CPU); 0 runs in this process, without crash isolation; "
                        "with --executor ray, the units in flight at once (default: one per CPU of the cluster, or per GPU on cuda)")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where the units run: local, worker processes on this machine (default); ray, Ray tasks on a "
                        "local Ray instance or the cluster at --ray-address, results streamed back into this machine's "
                        "store, with the same isolation and resume (needs pip install 'torchsleuth[ray]')")
    p.add_argument("--ray-address", metavar="HOST:PORT",
                   help="with --executor ray: the Ray cluster to join, its head node's address (port 6379 unless `ray start "
                        "--head --port` said otherwise) or 'auto' (the cluster this machine joined); "
                        "default: start a local Ray instance")
    p.add_argument("--timeout", type=seconds, default=config_module.DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"a case running longer is a hang (default {config_module.DEFAULT_TIMEOUT:g}); on a GPU the workers share, "
                        "a case is set aside after a fifth of it (a tenth if it sets searched values, a fiftieth once "
                        "such a case of its unit hung) and replayed alone at the end with all of it")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="module or .py file every worker imports first, e.g. to register kernels (repeatable)")
    p.add_argument("--out", default="torchsleuth-out", metavar="DIR", help="where repro scripts go (default ./torchsleuth-out)")
    p.add_argument("--db", metavar="PATH", help="SQLite file of runs, outcomes and findings (default DIR/runs.db); "
                   "rerunning the same command resumes an unfinished run")
    p.add_argument("--json", metavar="PATH", help="write the findings file (DESIGN.md's schema) to PATH")
    p.add_argument("--junit", metavar="PATH", help="write JUnit XML for CI to PATH: a suite per op, a test case per "
                   "variant and dtype, failing with its findings; `torchsleuth report` writes it from a stored run too")
    p.add_argument("--oracles", metavar="LIST",
                   help="deeper oracles to run as well, comma-separated, 'all' (every one but large; see below) or 'none'; "
                        "default: the cheap ones in a pointed run, a sample of autodiff and vmap in a catalog run")
    p.add_argument("--cpu-capabilities", metavar="LIST",
                   help="the CPU instruction sets the capability oracle compares (ATEN_CPU_CAPABILITY values: default, "
                        "avx2, avx512, ...), comma-separated, or 'all'; default every one this CPU supports; "
                        "implies --oracles capability")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="the compile oracle in full: each sample's contiguous functional call through torch.compile (inductor) "
                        "judged against eager, and eager after the compile against eager before, and the compiled variant (a "
                        "sample of the sweep's cases, every variant and layout, compiled and judged by the references and "
                        "contracts); default: the compiled variant alone in a pointed run, none in a catalog run; "
                        "in a catalog run --compile is the compiled variant within the budget (6 compiled cases per op); "
                        "--no-compile: none")
    p.add_argument("--large", nargs="?", const="all", metavar="FORMS",
                   help="also run the large oracle: pointwise ops (elements) and gathers and scatters (index) past 2^31 "
                        "and 2^32 elements and 2^31 bytes, reductions over 32767..65537 elements (length), other ops "
                        "over 65535..65537 rows (rows), factories (arange, linspace, full, eye, ...) making past 2^31 and 2^32 "
                        "elements, checked against the value the index gives (creation); FORMS picks among elements, "
                        "length, rows, span (a dim past 2^23 and 2^24: float32 index arithmetic), index, creation (default "
                        "all); each big probe first checks the device has the memory, else it is skipped saying how much it "
                        "needs; default: on in a pointed run on CUDA, off otherwise; --large none: off")
    p.add_argument("--list", action="store_true", help="list the ops that --ops selects, with variants and dtypes, and exit")
    p.add_argument("--no-shrink", action="store_true",
                   help="report findings as found: no replay, shrinking or diagnosis after the sweep")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..cases import select
    from ..config import SweepConfig
    from ..report import outputs

    # the cheap checks first, so a typo is reported before the catalog loads
    dtypes = select.resolve_dtypes(args.dtypes, DEFAULT_DTYPES)
    layouts_ = select.resolve_layouts(args.layouts)
    variants = select.resolve_variants(args.variants)
    oracles = select.resolve_oracles(args.oracles, BUILTIN)
    searches = select.resolve_names(args.search, search_registry.names(), "search", search_registry.names()) if args.search != "none" else ()
    device, gpus = _devices(args)
    _check_executor(args, device)
    oracles = _deep_flags(args, oracles, device)
    imports = load(args.imports)
    if not args.list:
        outputs.check(out=args.out, json=args.json, junit=args.junit)  # made now, or refused before any work
        # the fork server loads while this process loads the catalog to resolve the ops
        begin_workers(device, cpus() if args.workers is None else args.workers, args.executor)
    try:
        ops = select.resolve_ops(args.ops)
    finally:
        if not imports:  # the names the catalog holds, for the next command's quick check (precheck)
            _remember()
    if args.list:
        return _list(ops, device)
    config = SweepConfig(
        command="ops", device=device, ops=ops, dtypes=dtypes, layouts=layouts_, variants=variants,
        samples=DEFAULT_SAMPLES, workers=cpus() if args.workers is None else args.workers, timeout=args.timeout, imports=imports,
        shrink=not args.no_shrink, oracles=oracles, search=searches, probe_dtypes=bool(args.probe_dtypes),
        executor=args.executor, ray_address=args.ray_address, gpus=gpus,
    )
    deep = args.depth == "deep" or (args.depth == "auto" and args.ops is not None and len(ops) <= POINTED_OPS)
    config = depth(config, deep=deep, given={name for name in ("samples", "oracles", "budget", "probe_dtypes", "refusals", "time_target")
                                          if getattr(args, name) is not None})
    if args.compile:  # pointed: the compile oracle in full; a catalog run: the compiled variant within its budget
        wanted = ("compile", "compile:sampled") if deep else ("compile:catalog",)
        config = dataclasses.replace(config, oracles=(*config.oracles, *(o for o in wanted if o not in config.oracles)))
    if deep and args.compile is None and args.oracles is None and "compile" not in {family(o) for o in config.oracles}:
        # a pointed run's default: the compiled variant's sample (oracles/compile/variant.py)
        config = dataclasses.replace(config, oracles=(*config.oracles, "compile:sampled"))
    if deep and args.large is None and args.oracles is None and device.startswith("cuda") and "large" not in {family(o) for o in config.oracles}:
        # a pointed run on a GPU: sizes past 2^23, 2^24, 2^31 and 2^32 as far as its memory allows (oracles/large)
        config = dataclasses.replace(config, oracles=(*config.oracles, "large"))
    if args.budget is not None:
        config = dataclasses.replace(config, budget=args.budget[0], budget_seconds=args.budget[1])
    if args.samples is not None:
        config = dataclasses.replace(config, samples=args.samples)
    if args.refusals is not None:
        config = dataclasses.replace(config, refusals=args.refusals)
    if args.time_target is not None:
        config = dataclasses.replace(config, time_target=args.time_target)
    if not select.units(ops, dtypes, device, probe=config.probe_dtypes):
        raise UsageError(f"nothing to sweep: no selected op supports {', '.join(dtypes)} on {device}; `--list` shows each op's dtypes")
    config, executor = _executor(config, given=args.workers is not None)
    return finish(config, out=Path(args.out), db=args.db, json_path=args.json, progress=not args.no_progress, junit_path=args.junit,
                  executor=executor)


def _remember() -> None:
    from ..cases import opinfo
    from .precheck import remember

    remember(ops=opinfo.catalog(), layouts=[layout.name for layout in layouts.ALL], variants=VARIANTS, oracles=BUILTIN.names(),
             searches=search_registry.names())


def _devices(args) -> tuple[str, tuple[int, ...]]:
    """--device and --devices: the device the units name, and the GPUs the local pool's workers are spread over."""
    from .. import devices

    if args.devices is None:
        device = devices.parse(args.device or "cpu")
        return device, (devices.every_gpu(device) if args.executor == "local" and args.workers != 0 else ())
    if args.device not in (None, "cuda"):
        raise UsageError(f"--devices names the GPUs to spread the workers over; give it alone, not with --device {args.device}")
    if args.executor != "local":
        raise UsageError("--devices spreads the local pool's workers; with --executor ray, Ray hands each unit its GPU: give --device cuda")
    if args.workers == 0:
        raise UsageError("--devices spreads the workers over GPUs; --workers 0 has none (every case runs in this process)")
    return devices.spread(args.devices)


def _check_executor(args, device: str) -> None:
    """--executor, --ray-address and --workers together, before anything loads."""
    check_executor(args.executor, args.ray_address)
    if args.executor != "ray":
        return
    if args.workers == 0:
        raise UsageError("--workers 0 runs every case in this process, which --executor ray does not; give the units in flight "
                         "at once (N >= 1), or leave --workers out: one per CPU of the cluster")
    if device != device.split(":")[0]:
        raise UsageError(f"--device {device} with --executor ray: Ray hands each unit its GPU; give --device {device.split(':')[0]}")
    ray_pool.importable()


def _executor(config, *, given: bool):
    """The config with its workers for the executor, and the executor in words (the progress says it). Joins Ray (seconds)."""
    if config.executor != "ray":
        if not config.workers:
            return config, "this process (--workers 0: no crash isolation)"
        gpus = f" over GPUs {', '.join(str(g) for g in config.gpus)}" if config.gpus else ""
        return config, f"local pool, {config.workers} worker{'s' if config.workers != 1 else ''}{gpus}"
    cluster = ray_pool.connect(config.ray_address)
    capacity = cluster.capacity(config.device, config.threads)  # UsageError if none
    workers = config.workers if given else capacity
    return dataclasses.replace(config, workers=workers), f"{cluster}, at most {workers} units at once"


def _deep_flags(args, oracles: tuple[str, ...], device: str) -> tuple[str, ...]:
    """--compile, --large and --cpu-capabilities: their oracles added; the capabilities checked, named in the oracle."""
    if args.compile is False:
        oracles = tuple(o for o in oracles if family(o) != "compile")
    if args.large == "none":  # --large none: not even a pointed run's default on a GPU
        oracles = tuple(o for o in oracles if family(o) != "large")
    elif args.large and "large" not in oracles:
        # --large rows,index: the large oracle with those forms only (checked here, carried in the oracle's name)
        oracles += ("large",) if args.large == "all" else (BUILTIN.with_option("large", args.large),)
    if args.cpu_capabilities is None and "capability" not in oracles:
        return oracles
    if device != "cpu":
        raise UsageError(f"the capability oracle compares the CPU's kernels; it cannot run with --device {device}")
    chosen = BUILTIN.with_option("capability", args.cpu_capabilities)  # checked here, carried in the config
    return (*(o for o in oracles if o != "capability"), chosen)


def finish(config, *, out: Path, db: str | None, json_path: str | None, progress: bool, junit_path: str | None = None,
           executor: str = "") -> int:
    """Run the sweep (it writes the outputs), print the summary; the exit status. ``executor``: where it runs, in words."""
    from ..report import terminal
    from ..sweep import sweep
    from .ending import finish as ending

    db = db or str(out / "runs.db")
    result = sweep(config, db=db, progress=terminal.TerminalProgress(enabled=progress, executor=executor),
                   out=out, json=json_path, junit=junit_path)
    return ending(result, db=db)


def _list(ops, device: str) -> int:
    import torch
    from rich.table import Table

    from ..cases import select
    from ..report.terminal import stdout

    table = Table(title=f"{len(ops)} ops", title_justify="left")
    for column in ("op", "variants", f"dtypes on {torch.device(device).type}", "source"):
        table.add_column(column, overflow="fold")
    for name in ops:
        spec = select.spec(name, torch.device(device).type)
        table.add_row(name, ",".join(spec.variants), ",".join(spec.dtypes), spec.source)
    stdout().print(table)
    return ExitCode.CLEAN
