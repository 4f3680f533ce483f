"""``torchsleuth shard``: does every DTensor sharding give the single-device answer?"""

from __future__ import annotations

from pathlib import Path

from ..errors import ExitCode, UsageError
from ..frame import Silent
from .arguments import command, count, cpus, imports as load

EPILOG = """\
what it does:
  Runs ops through DTensor on simulated device meshes (LocalTensorMode, one
  process, the CPU) with every tensor argument placed Replicate, Shard(d)
  for each dim, Partial(sum|avg|max|min) or _StridedShard(d, split_factor),
  on even and uneven shards, forward and backward, and judges every rank's
  full_tensor() against the plain op on the full tensors. The ops are the
  OpInfo catalog (an op DTensor has no sharding rule for is a skip, counted
  with its reason, never a finding) and the composite chains where
  _StridedShard arises in practice (composite.flatten_sum, view_mean,
  flatten_softmax, flatten_layer_norm, flatten_transpose, flatten_slice,
  flatten_cat, flatten_select, flatten_stack, ...). A wrong result names
  the first aten op whose own output was wrong: the rule to blame.
  The surface chains (surface.*) reach DTensor past the functional op: in
  place (mul_, add_, fill_, copy_, masked_fill_, x[1:].mul_ returning x),
  in-place views (squeeze_, t_, transpose_), Python scalars (item, float,
  bool, int), numbers and 0-d tensors (x + 2.5, x / x.sum()), _like
  factories, and random ops under one seed (uniform_, dropout, rand_like:
  replicas equal, values in the law, a replicated draw the plain op's).

depth (--depth): a run pointed at a few ops (--ops naming at most 8) goes
  deep: the op's samples with the most dims, as OpInfo gives them (uneven
  shards) and grown to 12 per dim (even shards, every split factor), an op
  that takes a dim run over each dim with keepdim both ways; each argument
  on every placement that matters (Shard(d) of every dim, _StridedShard(d,
  sf) at every split factor that fits, Partial of each reduction; on 2-D
  meshes [_StridedShard(d, sf), Shard(d)] as FSDP2 over tensor parallelism
  makes, [Shard(d), Shard(e)], [Replicate, Shard(d)], [Shard(d),
  Partial(sum)], [Replicate, Partial]), and the first two arguments sharded
  together. One reduction (sum: about 2,000 cases, forward and backward,
  every default mesh) takes about a minute on 2 cores; an op whose cases
  cost more (a convolution) runs an even sample of them within --seconds,
  and the run says how many it ran. The catalog samples:
  --samples per op (most dims first) and --combinations placements each, and
  the run says so; point --ops at an op to go deep.

the simulator is checked too:
  before an op is judged on a placement, each argument must come back from
  distribute -> full_tensor() (else roundtrip_mismatch, the op not judged);
  composite.distribute_tensor checks that for plain tensors on every
  placement; what the simulator cannot judge (a round trip it fails, a
  result it cannot gather) is rerun on spawned gloo ranks and judged there,
  and the round trip's finding says whose bug it is (the simulator's, or
  DTensor's own when real process groups fail too); and --gloo N judged
  cases are replayed on real gloo process groups: a disagreement is a
  simulator_mismatch, never the op's.

where cases run (--backend):
  local  the default: meshes simulated in this process (LocalTensorMode,
         torch 2.10 and later). On an older torch (2.4 and later) every case
         runs on spawned gloo ranks instead, and the run says so.
  gloo   real gloo process groups on the CPU: one group of N processes per
         mesh size, spawned by the run and kept for its cases; or, launched
         under torchrun, this process is one rank of the launch.
  nccl   real NCCL process groups on GPUs, under torchrun only (--device cuda).

placements (--placements, kinds): replicate, shard, partial, strided
meshes (--mesh): 2, 3, 4 (1-D), 2x2, 2x3 (2-D), or any N / NxM

examples:
  torchsleuth shard --ops sum                         # deep: every placement that matters, about a minute
  torchsleuth shard                                   # the catalog, default budget (minutes on 2 cores)
  torchsleuth shard --ops 'composite.*,softmax,sum'  --mesh 2x2 --placements shard,strided
  torchsleuth shard --ops mm --combinations 0 --samples 0 --json mm.json   # every placement of every sample
  torchsleuth shard --import my_rules.py --ops my_op  # your sharding rules, registered in this process
  torchsleuth shard --backend gloo --ops softmax --mesh 2,2x2   # every case on real gloo ranks the run spawns
  torchrun --nproc-per-node 2 -m torchsleuth.cli.main shard --backend nccl --device cuda --mesh 2
                                                       # real process groups: each rank runs the cases,
                                                       # rank 0 judges and writes the store
"""


def add_parser(commands) -> None:
    from ..shard.cases import DEEP_SECONDS, DEFAULT_COMBINATIONS, DEFAULT_DTYPES, DEFAULT_GLOO, DEFAULT_SAMPLES, DTYPES
    from ..shard.placements import KINDS, MESHES
    from ..sweep import POINTED_OPS

    p = command(commands, "shard", "run ops through DTensor on every mesh and placement, judged against the single-device answer",
                __doc__, EPILOG)
    p.add_argument("--ops", metavar="NAMES", help="op names or globs, comma-separated (OpInfo names, composite.*, surface.*); default all")
    p.add_argument("--dtypes", metavar="LIST", help=f"dtypes from {', '.join(DTYPES)} (default {','.join(DEFAULT_DTYPES)})")
    p.add_argument("--mesh", metavar="LIST", help=f"mesh shapes, comma-separated (default {','.join(MESHES)})")
    p.add_argument("--placements", metavar="KINDS", help=f"placement kinds, comma-separated: {', '.join(KINDS)} (default all)")
    p.add_argument("--variants", metavar="LIST", help="functional, backward (default both)")
    p.add_argument("--depth", choices=("auto", "deep", "catalog"), default="auto",
                   help=f"deep: every placement that matters of the ops' shardable samples (see below); catalog: "
                        f"--samples and --combinations of each; auto (default): deep when --ops names at most {POINTED_OPS} ops")
    p.add_argument("--samples", type=count, default=DEFAULT_SAMPLES, metavar="N",
                   help=f"catalog depth: OpInfo samples per op and dtype, those with most dims first (default {DEFAULT_SAMPLES}; 0: all)")
    p.add_argument("--combinations", type=count, default=DEFAULT_COMBINATIONS, metavar="N",
                   help=f"cases per op, variant and sample, spread over the meshes and placements "
                        f"(default {DEFAULT_COMBINATIONS}; 0: every combination on every mesh)")
    p.add_argument("--seconds", type=float, default=DEEP_SECONDS, metavar="S",
                   help=f"deep depth: the matrix's time budget, in wall seconds on the workers (default {DEEP_SECONDS:g}); an op "
                        "whose cases need more runs an even sample of them, and the run says how many (0: every case)")
    p.add_argument("--gloo", type=count, default=DEFAULT_GLOO, metavar="N",
                   help=f"cases cross-checked on real gloo process groups after the sweep (default {DEFAULT_GLOO}; 0: none)")
    p.add_argument("--backend", default="local", choices=("local", "gloo", "nccl"),
                   help="local: simulate meshes in this process (default); gloo: real gloo process groups, spawned by the run "
                        "(or the ranks of a torchrun launch); nccl: a rank of a torchrun launch on GPUs")
    p.add_argument("--workers", type=count, default=cpus(), metavar="N",
                   help="worker processes the simulated cases are spread over (default: one per CPU); 0 runs them in this process")
    p.add_argument("--device", default="cpu", help="device of the tensors: cpu (default), or cuda with --backend nccl")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="module or .py file imported first, e.g. to register sharding rules (repeatable)")
    p.add_argument("--out", default="torchsleuth-out", metavar="DIR", help="where repro scripts go (default ./torchsleuth-out)")
    p.add_argument("--db", metavar="PATH", help="SQLite file of runs (default DIR/runs.db); rerunning the same command resumes")
    p.add_argument("--json", metavar="PATH", help="write the findings file (command \"shard\") to PATH")
    p.add_argument("--no-shrink", action="store_true", help="report findings as found, without shrinking them")
    p.add_argument("--list", action="store_true", help="list the ops --ops selects and how many cases each plans, and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")
    p.set_defaults(run=run)


def run(args) -> int:
    import os

    from .. import devices
    from ..cases.select import resolve_names
    from ..report import outputs, terminal
    from .ending import finish
    from ..shard import cases as shard_cases, placements as placing, support
    from ..shard.cases import DEFAULT_DTYPES, DTYPES, VARIANTS, ShardConfig

    missing = support.missing()
    if missing:
        raise UsageError(missing)
    dtypes = resolve_names(args.dtypes, DTYPES, "dtype", DEFAULT_DTYPES)
    variants = resolve_names(args.variants, VARIANTS, "variant", VARIANTS)
    meshes = tuple(m.name for m in placing.meshes(args.mesh))
    kinds = placing.kinds(args.placements)
    device = devices.parse(args.device)
    if args.backend == "nccl" and not device.startswith("cuda"):
        raise UsageError("--backend nccl runs on GPUs: give --device cuda")
    if args.backend == "local" and device != "cpu":
        raise UsageError("--backend local simulates meshes on the CPU; for GPUs launch with torchrun and --backend nccl --device cuda")
    launched = "WORLD_SIZE" in os.environ  # a rank of a torchrun launch
    if args.backend == "nccl" and not launched:
        raise UsageError("--backend nccl runs under torchrun: torchrun --nproc-per-node N -m torchsleuth.cli.main shard "
                         "--backend nccl --device cuda ...")
    if args.backend == "gloo" and not launched and device != "cpu":
        raise UsageError("--backend gloo spawns CPU ranks; for GPUs launch with torchrun and --backend nccl --device cuda")
    ops = _ops(args.ops, shard_cases.all_ops())
    out = Path(args.out)
    outputs.check(out=out, json=args.json)
    imports = load(args.imports)
    config = ShardConfig(device=device, backend=args.backend, ops=ops, dtypes=dtypes, variants=variants, meshes=meshes,
                         kinds=kinds, samples=args.samples, combinations=args.combinations, deep=_deep(args, ops), seconds=max(args.seconds, 0.0),
                         gloo=args.gloo if args.backend == "local" else 0, imports=imports, shrink=not args.no_shrink,
                         workers=args.workers if args.backend == "local" else 0)
    if args.list:
        for unit in shard_cases.units(config):
            print(f"{unit.op:40s} {unit.dtype:10s} {len(shard_cases.plan(unit, config))} cases")
        return ExitCode.CLEAN
    db = args.db or str(out / "runs.db")
    if args.backend != "local" and launched:  # this process is a rank of a torchrun launch: rank 0 alone gets the run back
        from ..shard import torchrun

        result = torchrun.run(config, db=db, out=out, json=args.json, progress=None if args.no_progress else _Lines())
        code = ExitCode.CLEAN
        if result is not None:
            code = finish(result, db=db)
        torchrun.leave(code)
    else:
        from ..shard.sweep import sweep

        if support.simulator():
            print(f"{support.simulator()}: every case runs on spawned gloo ranks", flush=True)
        result = sweep(config, db=db, progress=terminal.TerminalProgress(enabled=not args.no_progress), out=out, json=args.json)
    return finish(result, db=db)


class _Lines(Silent):
    """Progress under torchrun, where a bar per rank would garble the log: a line every 50 cases (rank 0's)."""

    def __init__(self) -> None:
        self.cases = 0

    def outcome(self, outcome) -> None:
        self.cases += 1
        if self.cases % 50 == 0:
            print(f"{self.cases} cases", flush=True)


def _deep(args, ops: tuple[str, ...]) -> bool:
    """Whether the run plans every placement that matters (targeted.py): asked for, or pointed at a few ops."""
    from ..sweep import POINTED_OPS

    return args.depth == "deep" or (args.depth == "auto" and bool(ops) and len(ops) <= POINTED_OPS)


def _ops(text: str | None, names: tuple[str, ...]) -> tuple[str, ...]:
    """The ops ``--ops`` names among ``names`` (the catalog and the composite chains); () for all."""
    from ..cases.select import resolve_ops

    if text is None or text.strip() in ("", "all"):
        return ()
    return resolve_ops(text, names=names, command="shard")
