#!/bin/bash
# Device call of the 2026-12-03 (fifth) session (1x H200, torch 2.11): the whole default catalog as a timeline with
# the tree of eab2fd4 (since run K: the fork server begun before planning and loading the catalog itself, killed
# workers not waited for, the judge's per-case changes, OpInfo's samples made without a stack walk), as run K was
# made (bench/h200_batch25.sh); its store comes back to be compared with run K's. Then the tests that need CUDA
# (tests/test_oracle_vmap.py, test_transfer.py, test_oracle_autodiff.py, test_forkserver.py).
set -u
OUT=${1:?out dir}
W=/tmp/batch28; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${SECONDS_LIMIT:-400} python3 bench/catalog_timeline.py --device cuda --out $W/run > $W/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json run/runs.db stdout.txt 2>/dev/null
timeout ${TESTS_LIMIT:-150} python3 -m pytest -q -p no:cacheprovider -rs tests/test_oracle_vmap.py tests/test_transfer.py \
  tests/test_oracle_autodiff.py tests/test_forkserver.py > $OUT/tests.txt 2>&1
