#!/bin/bash
# Device call of the 2026-12-03 (sixth) session (1x H200, torch 2.11): `torchsleuth ops --device cuda --no-shrink` itself
# again, the whole default catalog timed from the process's start (catalog_timeline.py --command), with the tree of now
# (since run P, bench/h200_batch33.sh: the report's scripts copy the kit's helpers without parsing them again, the
# hangs' replays start as the last unit is handed out in workers beyond the pool, Pool.close waits for its workers
# together). Then tests/test_forkserver.py's fake-numba test with its skip gone (a real numba-cuda's import hook left
# out) and what sys.meta_path holds here.
set -u
OUT=${1:?out dir}
W=/tmp/batch34; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${SECONDS_LIMIT:-420} python3 bench/catalog_timeline.py --device cuda --out $W/run --command > $W/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $W/run > $OUT/read.txt 2>&1
tail -30 $W/stdout.txt > $OUT/command_tail.txt
tar czf $OUT/run.tgz -C $W run/timeline.jsonl run/summary.json run/runs.db stdout.txt 2>/dev/null
python3 -c "import sys; print([(getattr(f, '__module__', ''), type(f).__module__, repr(f)[:80]) for f in sys.meta_path])" > $OUT/tests.txt 2>&1
timeout ${TESTS_LIMIT:-120} python3 -m pytest -q -p no:cacheprovider -rs --tb=short \
  "tests/test_forkserver.py::test_beside_a_gpu_numbas_cuda_check_is_kept_out_of_the_load_and_numba_is_importable_after" \
  "tests/test_pool.py::test_on_a_shared_gpu_a_hang_set_aside_is_replayed_beside_the_last_unit_in_a_worker_beyond_the_pool" \
  "tests/test_pool.py::test_close_kills_the_workers_that_do_not_stop_together_and_waits_for_them_together" >> $OUT/tests.txt 2>&1
