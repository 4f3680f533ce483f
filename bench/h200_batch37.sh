#!/bin/bash
# Device call of the 2026-12-03 (seventh) session (1x H200, torch 2.11), the session's last device time (too little for a
# whole catalog): with the tree after runs R and S (bench/h200_batch36.sh; the warm spares ahead of the replays taken
# out, the parent no longer waiting for a worker whose device is lost), the units of a catalog's end: the attention ops
# (crashing by the dozen, each crash a worker whose device context is torn down) and the hanging polynomials (a case
# setting searched values set aside after 6 s), as a timeline written straight under $OUT so that a call cut short
# still brings back what it had. Then tests/test_pool.py's new test beside the GPU, and, if time is left, the same units
# with the session's starting tree (a1ad7d7, carried as .whl/old.tar) for a comparison in the same call.
set -u
OUT=${1:?out dir}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src PYTORCH_KERNEL_CACHE_PATH=/tmp/kernels37
OPS=special.laguerre_polynomial_l,special.legendre_polynomial_p,nn.functional.scaled_dot_product_attention,torch.ops.aten._flash_attention_forward,torch.ops.aten._efficient_attention_forward
timeout ${SECONDS_LIMIT:-130} python3 bench/catalog_timeline.py --device cuda --ops $OPS --out $OUT/run > $OUT/stdout.txt 2>&1
python3 bench/catalog_timeline.py --read $OUT/run > $OUT/read.txt 2>&1
rm -f $OUT/run/runs.db-*
timeout ${TESTS_LIMIT:-30} python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_pool.py -k "lost_is_replaced" > $OUT/tests.txt 2>&1
mkdir -p /tmp/old && tar xf .whl/old.tar -C /tmp/old
PYTHONPATH=/tmp/site:/tmp/old/src PYTORCH_KERNEL_CACHE_PATH=/tmp/kernels37old timeout ${SECONDS_LIMIT:-130} python3 bench/catalog_timeline.py \
  --device cuda --ops $OPS --out $OUT/old > $OUT/stdout_old.txt 2>&1
python3 bench/catalog_timeline.py --read $OUT/old > $OUT/read_old.txt 2>&1
rm -f $OUT/old/runs.db-*
