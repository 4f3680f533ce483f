#!/bin/bash
# Device call of the 2026-12-03 (sixth) session (1x H200, torch 2.11): the whole default catalog as a timeline with the
# tree of now (since run M, bench/h200_batch29.sh: 09d8ca8, the smaller share after a hang for cases setting searched
# values only; forward-mode AD's decompositions in the fork server), timed from the process's start (the harness now
# logs when the ops were resolved, the units planned and the fork server answered). Then the last three tests of
# tests/test_forkserver.py, which never ran beside a GPU, and the fake-numba test with its skip lifted, for its traceback.
set -u
OUT=${1:?out dir}
W=/tmp/batch32; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${SECONDS_LIMIT:-400} python3 bench/catalog_timeline.py --device cuda --out $W/run > $W/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json run/runs.db stdout.txt 2>/dev/null
sed 's/@pytest.mark.skipif(torch.cuda.is_available(),/@pytest.mark.skipif(False,/' tests/test_forkserver.py > tests/test_forkserver_lifted.py
timeout ${TESTS_LIMIT:-150} python3 -m pytest -q -p no:cacheprovider -rs --tb=long \
  "tests/test_forkserver_lifted.py::test_beside_a_gpu_numbas_cuda_check_is_kept_out_of_the_load_and_numba_is_importable_after" \
  "tests/test_forkserver.py::test_a_fork_server_begun_early_loads_while_its_caller_goes_on_and_is_the_one_the_pool_asks" \
  "tests/test_forkserver.py::test_a_sweep_with_workers_starts_the_fork_server_before_it_plans_its_units" \
  "tests/test_forkserver.py::test_the_ops_command_starts_the_fork_server_before_it_loads_the_catalog_to_resolve_its_ops" \
  > $OUT/tests.txt 2>&1
