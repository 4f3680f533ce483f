#!/bin/bash
# Device call of the 2026-12-03 (fifth) session (1x H200, torch 2.11): the whole default catalog as a timeline with
# the tree of 1ffc199 (since run L, bench/h200_batch28.sh: the fork server started before the ops are resolved, as
# `torchsleuth ops` now does; a unit whose case hung has its other cases set aside after 1.2 s), as run L was made;
# its store comes back to be compared with run L's. Then the tests that need CUDA, by name, and tests/test_forkserver.py.
set -u
OUT=${1:?out dir}
W=/tmp/batch29; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${SECONDS_LIMIT:-400} python3 bench/catalog_timeline.py --device cuda --out $W/run > $W/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json run/runs.db stdout.txt 2>/dev/null
timeout ${TESTS_LIMIT:-150} python3 -m pytest -q -p no:cacheprovider -rs \
  "tests/test_oracle_vmap.py::test_a_copy_to_the_host_that_does_not_block_is_read_once_it_has_landed" \
  "tests/test_oracle_autodiff.py::test_a_wrong_forward_mode_formula_on_cuda_is_found_and_no_case_fails" \
  tests/test_transfer.py tests/test_forkserver.py > $OUT/tests.txt 2>&1
