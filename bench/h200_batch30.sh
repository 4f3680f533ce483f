#!/bin/bash
# Device call of the 2026-12-03 (fifth) session (1x H200, torch 2.11): the tests of tests/test_forkserver.py that
# bench/h200_batch29.sh's time limit left unrun or that failed there (two that play a GPU on the CPU met a real one:
# workers.preload's own load at import now left out of them), with their tracebacks.
set -u
OUT=${1:?out dir}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${TESTS_LIMIT:-240} python3 -m pytest -q -p no:cacheprovider --tb=short -rs tests/test_forkserver.py \
  -k "beside_a_gpu or unsafe_is_replaced or begun_early or plans_its_units or resolve_its_ops" > $OUT/tests.txt 2>&1
tail -c 6000 $OUT/tests.txt
