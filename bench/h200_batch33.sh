#!/bin/bash
# Device call of the 2026-12-03 (sixth) session (1x H200, torch 2.11): `torchsleuth ops --device cuda --no-shrink` itself,
# the whole default catalog, timed from the process's start (catalog_timeline.py --command: the command's own imports,
# checks, sweep, report and repro scripts), the tree of run O plus forward-mode AD's decompositions in the fork server;
# the hang replays' begin, kill and description logged. Then why tests/test_forkserver.py's fake numba is not asked
# beside the real GPU (the control of the test skipped there).
set -u
OUT=${1:?out dir}
W=/tmp/batch33; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${SECONDS_LIMIT:-420} python3 bench/catalog_timeline.py --device cuda --out $W/run --command > $W/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
tail -30 $W/stdout.txt > $OUT/command_tail.txt
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json run/runs.db stdout.txt 2>/dev/null
F=/tmp/fakenumba; mkdir -p $F/numba/cuda; : > $F/numba/__init__.py
printf 'import os\ndef is_available():\n    open(os.environ["NUMBA_ASKED"], "w").close()\n    return True\n' > $F/numba/cuda/__init__.py
NUMBA_ASKED=$F/asked timeout 120 python3 -c "
import sys; sys.path.insert(0, '$F')
import torch; torch.cuda.is_available = lambda: True; torch.cuda.device_count = lambda: 1
print('numba before:', 'numba' in sys.modules, [m for m in sys.modules if 'numba' in m][:5])
import importlib.util; print('spec:', importlib.util.find_spec('numba'))
import torch.testing._internal.common_utils as cu; print('TEST_NUMBA', cu.TEST_NUMBA)
import torch.testing._internal.common_cuda as cc; print('common_cuda:', cc.TEST_NUMBA, cc.TEST_NUMBA_CUDA)
import numba; print('numba:', numba.__file__)
import os; print('asked:', os.path.exists('$F/asked'))
" > $OUT/numba.txt 2>&1
