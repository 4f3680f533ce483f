#!/bin/bash
# A hang's kin across the dtypes of one op (bench/worker-start.md): the same pointed run over two dtypes with kin per
# unit (a tree given as the first argument, e.g. a checkout of 21c2eb7) and kin across units (src/ as it is).
#   bash bench/hang_kin_dtypes.sh OLD_SRC [OP] [DTYPES]   (default special.laguerre_polynomial_l float32,float64)
set -euo pipefail
old=${1:?the src/ directory of a tree with kin per unit}; op=${2:-special.laguerre_polynomial_l}; dtypes=${3:-float32,float64}
root=$(pwd); work=$(mktemp -d)
for v in unit op; do
  src="$root/src"; [ $v = unit ] && src="$old"
  d="$work/run-$v"; mkdir -p "$d"; cd "$d"
  s=$(date +%s.%N)
  PYTHONPATH="$src" "$root/.venv/bin/torchsleuth" ops --ops "$op" --dtypes "$dtypes" --timeout 10 --no-shrink > out.log 2>&1 || true
  e=$(date +%s.%N)
  db=torchsleuth-out/runs.db
  echo "kin per $v: $(python3 -c "print(f'{$e - $s:.1f} s wall')"); $(grep -o '[0-9,]* cases in [0-9.]* s' out.log | head -1);" \
       "hangs $(sqlite3 "$db" "select count(*) from findings where kind='hang'");" \
       "collateral $(sqlite3 "$db" "select count(*) from notes where kind='collateral'");" \
       "outcomes $(sqlite3 "$db" "select case_id||status from outcomes order by 1" | md5sum | cut -c1-8)"
done
