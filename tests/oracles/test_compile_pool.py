"""The compiled variant starts no pool of compile processes (oracles.compile.compiler, "Compile threads").

Where Triton is installed, inductor starts ``compile_threads`` processes at a process's first compile; sixteen sweep
workers on a GPU host each started sixteen. This machine has no Triton, so the test makes inductor believe it has
(``has_triton_package``) and decide on four threads, as a four-core GPU host would, in a fresh interpreter: a sweep
with the compiled variant leaves the interpreter with no child process, and what inductor's backend does first at a
plain compile, with the same settings, starts the pool (the check can fail; on a torch that starts none, it skips).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, os, sqlite3, subprocess
import torch
import torch._inductor.async_compile as async_compile
import torch._inductor.config as inductor_config

async_compile.has_triton_package = lambda: True  # a GPU host's torch
inductor_config.compile_threads = 4

def children():
    return subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True).stdout.split()

from torchsleuth import SweepConfig, resolve_ops, sweep

config = SweepConfig(ops=resolve_ops("sinh"), dtypes=("float32",), layouts=("contiguous",),
                     variants=("functional",), samples=1, workers=0, search=(), oracles=("compile:sampled",), shrink=False)
result = sweep(config, db=os.environ["DB"])
after_sweep = children()
compiled = sqlite3.connect(os.environ["DB"]).execute(
    "select count(*) from outcomes where case_id like '%@compile:%' and status = 'pass'").fetchone()[0]
async_compile.maybe_warm_pool()  # what inductor's backend does first at a compile, outside torchsleuth's
print(json.dumps({"compiled": compiled, "after_sweep": after_sweep, "after_plain": children()}))
"""


@pytest.mark.slow
def test_compiled_cases_start_no_compile_pool(tmp_path):
    env = {**os.environ, "DB": str(tmp_path / "runs.db"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    if not seen["after_plain"]:
        pytest.skip("this torch starts no compile pool at a plain compile either: nothing to keep from starting")
    assert seen["compiled"] > 0, seen  # the sweep compiled cases
    assert seen["after_sweep"] == [], f"the compiled variant started compile processes: {seen}"
