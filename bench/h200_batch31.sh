#!/bin/bash
# Device call of the 2026-12-03 (fifth) session (1x H200, torch 2.11), the session's last device time (too little
# for a whole catalog): tests/test_forkserver.py's tests from where bench/h200_batch29.sh's time limit stopped, the two
# that failed there among them; then, with the tree of 4e9f3bb, the units where run M's hangs and set-asides were
# (special.erfcx and the hanging polynomials, with the chebyshev and hermite ones that run beside them), as a timeline
# written straight under $OUT so that a call cut short still brings back what it had.
set -u
OUT=${1:?out dir}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
timeout ${TESTS_LIMIT:-110} python3 -m pytest -q -p no:cacheprovider --tb=short -rs tests/test_forkserver.py \
  -k "beside_a_gpu or unsafe_is_replaced or begun_early or plans_its_units or resolve_its_ops" > $OUT/tests.txt 2>&1
OPS=special.erfcx,special.laguerre_polynomial_l,special.legendre_polynomial_p,special.chebyshev_polynomial_t,special.hermite_polynomial_h
timeout ${SECONDS_LIMIT:-110} python3 bench/catalog_timeline.py --device cuda --ops $OPS --out $OUT/run > $OUT/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $OUT/run > $OUT/read.txt 2>&1
rm -f $OUT/run/runs.db-*
