"""``torchsleuth watch``: run a training script unchanged and find the op in its step that is wrong."""

from __future__ import annotations

import dataclasses
import runpy
import sys
import time
import traceback
from pathlib import Path

from ..errors import ExitCode, UsageError, one_line
from .arguments import command, fraction, positive

EPILOG = """\
what it checks:
  invariants around optimizer.step(): gradients reach every parameter that
  requires grad; no NaN or inf in gradients or parameters; each parameter with a
  nonzero gradient changes; the optimizer's state is written. A violation names
  the parameter by its module path (encoder.weight) with its shape, stride,
  contiguity, dtype and device. Every step of the first 16 is checked; on a
  fast loop, after them, as many as keep the checks within 2% of the step's
  time, at least one in 32 (what they catch stays: found at most 32 steps
  late); the run's note says how many were checked. --all-steps checks every
  step.

  shadow replay (unless --invariants-only): every aten op of the forward,
  backward and optimizer step is made again on copies of its tensors and judged
  as `torchsleuth ops` judges a case: against the same call on contiguous
  tensors, in float64, and the contracts (an in-place result reaches self,
  nothing is written outside a view). A finding names the op, the layouts of
  its arguments, where it was issued (module, backward node or optimizer),
  which parameter or optimizer state its tensors are, and the script's stack.
  A training loop makes the same calls every step: by default each distinct call
  (op, shapes, strides, dtypes, devices, kinds of other arguments) is judged the
  first time it is made, which is what layout- and dtype-dependent bugs need;
  --judge every judges every call, for bugs that need particular values.

sharded programs (DTensor, parallelize_module with Colwise, Rowwise and
SequenceParallel, FSDP2 fully_shard, and their mixes on a 2-D mesh):
  --nproc N starts N ranks with the environment torchrun gives a script
  (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): the script's own
  init_process_group / init_device_mesh joins them (gloo on the CPU, NCCL
  with a GPU a rank). Each distinct DTensor call (op, placements, shapes,
  mesh) is judged against the plain op on its gathered tensors: the rule's
  claimed placement must reconstruct the plain result. The invariants are
  checked per rank on local shards. One run holds every rank's findings.
  Under torchrun: torchrun --nproc-per-node N -m torchsleuth watch train.py.
  --parity runs it on one rank too and names the first step and parameter
  where the losses or full gradients part beyond the reduction order's
  allowance.

examples:
  torchsleuth watch train.py --epochs 1              # the script's own arguments follow it
  torchsleuth watch --judge every train.py          # every call of every step (costs tens of times the step)
  torchsleuth watch --judge every --every 10 --sample 0.2 train.py  # every 10th step, a fifth of its calls
  torchsleuth watch --invariants-only train.py       # cheapest: invariants only
  torchsleuth watch --import my_kernels.py train.py  # with kernels registered by torch.library
  torchsleuth watch --nproc 2 examples/train_tp_mlp.py   # a tensor-parallel program on 2 gloo ranks
  torchsleuth watch --nproc 2 --parity examples/train_fsdp2.py  # and on one rank: where the runs part
  torchsleuth watch --nproc 4 examples/train_2d.py   # FSDP2 over dp, TP and SP over tp: a 2x2 mesh

torchsleuth's flags go before the script: one written after it goes to the
script (a warning says so).

exit status: 0 no findings, 1 findings, 2 usage error, 3 the script failed
(its traceback is shown, the run stored as failed), 4 nothing was checked
(no optimizer step and no op call judged).

in Python: `with torchsleuth.watch() as w: train()`, then `w.findings`.
"""


def add_parser(commands) -> None:
    p = command(commands, "watch", "run a training script and find the op in its step that is wrong", __doc__, EPILOG)
    p.add_argument("--every", type=positive, default=1, metavar="N", help="judge the ops of every N-th optimizer step (default 1)")
    p.add_argument("--sample", type=fraction, default=1.0, metavar="F", help="judge this fraction of the ops, at random (default 1)")
    p.add_argument("--judge", choices=("first", "every"), default="first",
                   help="judge each distinct call the first time it is made (default), or every call")
    p.add_argument("--invariants-only", action="store_true", help="check the training invariants only: no shadow replay")
    p.add_argument("--all-steps", action="store_true",
                   help="check the invariants at every optimizer step (default: each of the first 16, then as many as "
                        "keep them within 2%% of the step's time, at least one in 32)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="module or .py file imported first, e.g. to register kernels (repeatable)")
    p.add_argument("--nproc", type=positive, metavar="N",
                   help="run the script on N ranks as torchrun would (a sharded program: its DTensor calls judged)")
    p.add_argument("--parity", action="store_true",
                   help="with --nproc: run the script on one rank too, and report the first step and parameter at which the "
                        "runs' losses or full gradients part beyond the reduction order's allowance")
    p.add_argument("--out", default="torchsleuth-out", metavar="DIR", help="where repro scripts go (default ./torchsleuth-out)")
    p.add_argument("--db", metavar="PATH", help="SQLite file the findings are stored in (default DIR/runs.db)")
    p.add_argument("--json", metavar="PATH", help="write the findings file (its keys: docs/findings.md) to PATH")
    p.add_argument("script", metavar="SCRIPT", help="the training script, run as `python SCRIPT ARGS` would run it")
    # argparse counts a trailing "..." as required and names it when SCRIPT is missing: it may be empty
    p.add_argument("script_args", nargs="...", metavar="ARGS", help="the script's own arguments").required = False
    p.set_defaults(run=run)
    _PARSER_FLAGS.update(flag for action in p._actions for flag in action.option_strings)


_PARSER_FLAGS: set[str] = set()  # watch's own flags, to warn of one written after the script


def _nothing(args) -> str:
    """Why a watch checked nothing: the reason its exit status 4 gives."""
    calls = "" if args.invariants_only else " and no op call torchsleuth could judge"
    return f"the script made no optimizer step{calls} (is the training loop behind a flag, or not reached?)"


def run(args) -> int:
    from ..report import outputs
    from ..watch import watch
    from .arguments import imports
    from .ending import finish

    from ..watch import ranks as launch

    script = Path(args.script)
    if not script.is_file():
        raise UsageError(f"no script {args.script!r}: give the path of a Python file, then its arguments")
    place = launch.this_rank()
    if place is not None and args.nproc:
        raise UsageError("--nproc starts the ranks itself: under torchrun leave it out (torchrun --nproc-per-node N -m torchsleuth watch ...)")
    if place is not None or args.nproc:
        _sharded_support()
    if args.parity and not args.nproc and (place is None or not place.parent):
        raise UsageError("--parity runs the script at two world sizes, which it starts itself: give --nproc N as well")
    out = Path(args.out)
    if place is None or (place.rank == 0 and not place.parent):
        outputs.check(out=out, json=args.json)
    db = args.db or str(out / "runs.db")
    if args.nproc:
        return _parent(args, out, db)
    imports(args.imports)
    _flags_after(args)
    argv = sys.argv
    sys.argv = [str(script), *args.script_args]
    sys.path.insert(0, str(script.resolve().parent))
    status, error = 0, None
    stored = place is None
    with watch(db=db if stored else None, every=args.every, sample=args.sample, invariants_only=args.invariants_only,
               all_steps=args.all_steps, repeats=args.judge == "every", program=" ".join(sys.argv), out=out if stored else None,
               json=args.json if stored else None, ranks=place.world if place else 0, rank=place.rank if place else 0,
               parity=args.parity) as session:
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as e:  # the script's own exit: a failure unless it is 0
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if status:
                session.failure = f"the script exited with status {status}"
        except Exception as e:
            if place is not None:  # on a rank: the rank posts what it found all the same, so the gatherer is not left waiting
                traceback.print_exc()
                status = 1
            else:  # the script raised: stored as a failed run, its traceback shown as the user's
                error = e
                session.failure = f"the script raised {one_line(e)}"
        finally:
            sys.argv = argv
            if sys.path and sys.path[0] == str(script.resolve().parent):
                sys.path.pop(0)
    if place is not None:
        return _rank_done(args, session, place, status, out, db)
    if error is not None:
        sys.stderr.write(user_traceback(error))
    result = session.result
    steps, calls = session.context.step, (session.shadow.judged if session.shadow else 0)
    why = _nothing(args)
    status = finish(result, db=db, checked=steps + calls, why=why)
    if not steps and calls and not session.failure:
        print("the script made no optimizer step: the training invariants were not checked, only its op calls")
    if session.failure:
        print(f"{session.failure}: the run is stored as failed (exit status {int(ExitCode.SCRIPT_FAILED)})", file=sys.stderr)
        return ExitCode.SCRIPT_FAILED
    return status


def user_traceback(error: BaseException) -> str:
    """``error``'s traceback as Python would print it for the script, less torchsleuth's frames and runpy's."""
    here = str(Path(__file__).resolve().parents[1])
    hidden = (here, runpy.__file__, "<frozen runpy>")
    exception = traceback.TracebackException.from_exception(error)
    for part in _chain(exception):
        part.stack = traceback.StackSummary.from_list([f for f in part.stack if not f.filename.startswith(hidden)])
    return "".join(exception.format())


def _chain(exception: traceback.TracebackException):
    seen = set()
    while exception is not None and id(exception) not in seen:
        seen.add(id(exception))
        yield exception
        exception = exception.__cause__ or exception.__context__


def _flags_after(args) -> None:
    """A warning for each of torchsleuth's watch flags written after the script: they go to the script, as its own."""
    ours = {flag for flag in _PARSER_FLAGS if flag.startswith("--")} - {"--help"}  # a script's own --help is common
    given = list(dict.fromkeys(a.partition("=")[0] for a in args.script_args if a.partition("=")[0] in ours))
    if given:
        print(f"warning: {', '.join(given)} after the script {args.script} go{'es' if len(given) == 1 else ''} to the "
              f"script, not to torchsleuth; put torchsleuth's flags before the script (torchsleuth watch {given[0]} ... {args.script})",
              file=sys.stderr)


def _sharded_support() -> None:
    from ..shard import support

    if support.missing():
        raise UsageError(f"watch on ranks judges DTensor calls: {support.missing()}")


def _child_argv(args) -> list[str]:
    """The flags a rank's own ``torchsleuth watch`` gets: the judging ones (the parent stores and writes the outputs)."""
    argv = ["--every", str(args.every), "--sample", str(args.sample), "--judge", args.judge]
    argv += ["--invariants-only"] * args.invariants_only + ["--all-steps"] * args.all_steps + ["--parity"] * args.parity
    for name in args.imports:
        argv += ["--import", name]
    return [*argv, args.script, *args.script_args]


def _rerun(args) -> list[str]:
    """The watch arguments that compare the two runs again from anywhere (paths made absolute): a parity finding's
    script runs them, with the shadow replay off (parity needs only the steps' records)."""
    argv = ["--nproc", str(args.nproc), "--parity", "--invariants-only"]
    for name in args.imports:
        argv += ["--import", str(Path(name).resolve()) if name.endswith(".py") else name]
    return [*argv, str(Path(args.script).resolve()), *args.script_args]


def _parent(args, out: Path, db: str) -> int:
    """``--nproc N``: the ranks started, their findings gathered into one run (watch.ranks)."""
    from ..frame import run_frame
    from ..watch import WatchConfig, ranks as launch, sharded_repro
    from .ending import finish

    program = " ".join([args.script, *args.script_args])
    started = time.monotonic()  # the run's time is the ranks' (and the one-rank run's), not only the gathering
    alone = launch.spawn(1, _child_argv(args)) if args.parity else None
    posts, codes = launch.spawn(args.nproc, _child_argv(args))
    config = WatchConfig(program=program, device=launch.device(posts), every=args.every, sample=args.sample,
                         invariants_only=args.invariants_only, repeats=args.judge == "every", all_steps=args.all_steps,
                         ranks=args.nproc, parity=args.parity, imports=tuple(args.imports))
    with run_frame(config, db=db, out=out, json=args.json, scripts=sharded_repro.writer(tuple(args.imports)),
                   started=started) as frame:
        launch.record(frame, posts, codes, args.nproc)
        if alone is not None:
            launch.record_parity(frame, alone[0][0], posts[0], args.nproc, program, rerun=_rerun(args))
    failed = [r for r, code in enumerate(codes) if code]
    status = finish(frame.result, db=db, checked=None if failed else launch.checked(posts), why=_nothing(args))
    if failed:
        print(f"rank(s) {', '.join(map(str, failed))} exited with a nonzero status: the run is stored as failed "
              f"(exit status {int(ExitCode.SCRIPT_FAILED)})", file=sys.stderr)
        return ExitCode.SCRIPT_FAILED
    return status


def _rank_done(args, session, place, status: int, out: Path, db: str) -> int:
    """A rank's part done: what it found posted; under torchrun rank 0 gathers every rank's post into one run."""
    from ..frame import run_frame
    from ..watch import ranks as launch, sharded_repro
    from .ending import finish

    mine = launch.payload(session, rank=place.rank, status=status)
    if place.parent or place.rank != 0:
        launch.post(place.rank, mine)
        return status
    posts = launch.collect(place.world, skip=0)
    posts[0] = mine
    config = dataclasses.replace(session.config, imports=tuple(args.imports), device=launch.device(posts))
    with run_frame(config, db=db, out=out, json=args.json, scripts=sharded_repro.writer(tuple(args.imports)),
                   started=session.started) as frame:
        launch.record(frame, posts, [], place.world)
    return finish(frame.result, db=db, checked=launch.checked(posts), why=_nothing(args))
