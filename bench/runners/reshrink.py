"""The shrink stage again over a stored run, timed; then its findings file and repros.

For a run whose shrinking was cut short or made by an older torchsleuth (the
CUDA sweep in cuda-sweep.md was shrunk this way after a fix), or to time the
shrink stage alone (cpu-sweep.md):

    python3 bench/run.py reshrink RUNS_DB [--run ID] [--workers N] --out DIR

It forgets the run's stored shrink results and diagnoses (work on a copy of
the store to keep them), shrinks and diagnoses every finding again, and writes
DIR/findings.json, DIR/repros/ and the record DIR/reshrink.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import _record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db")
    parser.add_argument("--run", type=int, help="run id (default: the newest)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from torchsleuth import codec
    from torchsleuth.config import SweepConfig
    from torchsleuth.frame import result as stored_result
    from torchsleuth.report.outputs import write_outputs
    from torchsleuth.store.sqlite import Store
    from torchsleuth.sweep import shrink_run

    store = Store(args.db)
    try:
        run = store.run(args.run) if args.run else store.runs()[-1]
        stored = codec.decode(SweepConfig, run.config)
        config = SweepConfig(**{**{name: getattr(stored, name) for name in SweepConfig.__dataclass_fields__}, "workers": args.workers})
        store.db.execute("DELETE FROM shrunk WHERE run = ?", (run.id,))
        store.db.execute("DELETE FROM diagnoses WHERE run = ?", (run.id,))
        store.commit()
        started = time.monotonic()
        shrink_run(config, store, run.id)
        seconds = time.monotonic() - started
        print(f"shrink stage: {seconds:.1f} s with {args.workers} workers")
        result = stored_result(store, run.id)
        statuses = {}
        for shrunk in result.shrunk.values():
            statuses[shrunk.status] = statuses.get(shrunk.status, 0) + 1
        print(f"findings {len(result.findings)} (flaky {len(result.flaky)}), groups {len(result.groups)}, shrink statuses {statuses}")
        out = Path(args.out)
        write_outputs(result, out=out, json=out / "findings.json")
        _record.write(args.out, "reshrink", device=config.device, figures={
            "shrink_s": round(seconds, 1), "workers": args.workers, "findings": len(result.findings), "flaky": len(result.flaky),
            "groups": len(result.groups), "shrink statuses": statuses})
    finally:
        store.close()


if __name__ == "__main__":
    main()
