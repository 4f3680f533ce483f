#!/bin/bash
# The same pointed run with hangs' kin set aside off and on, one after the other, twice (bench/worker-start.md).
#   bash bench/hang_kin.sh [OP] [DTYPE]      (default special.laguerre_polynomial_l float64; run from the repo root)
# "off" is a copy of src/ whose sweep passes no kin function to the pool; "on" is src/ as it is.
set -euo pipefail
op=${1:-special.laguerre_polynomial_l}; dtype=${2:-float64}
root=$(pwd); work=$(mktemp -d)
cp -r "$root/src" "$work/off" && cp -r "$root/src" "$work/on"
sed -i 's/, kin=edits.kin, /, /' "$work/off/torchsleuth/sweep.py"
grep -q "kin=edits.kin" "$work/off/torchsleuth/sweep.py" && { echo "could not turn kin off"; exit 1; }
for i in 1 2; do for v in off on; do
  d="$work/run-$v-$i"; mkdir -p "$d"; cd "$d"
  s=$(date +%s.%N)
  PYTHONPATH="$work/$v" "$root/.venv/bin/torchsleuth" ops --ops "$op" --dtypes "$dtype" --timeout 10 --no-shrink > out.log 2>&1 || true
  e=$(date +%s.%N)
  db=torchsleuth-out/runs.db
  echo "kin $v, run $i: $(python3 -c "print(f'{$e - $s:.1f} s wall')"); $(grep -o '[0-9,]* cases in [0-9.]* s' out.log | head -1);" \
       "hangs $(sqlite3 "$db" "select count(*) from findings where kind='hang'");" \
       "outcomes $(sqlite3 "$db" "select case_id||status from outcomes order by 1" | md5sum | cut -c1-8)"
done; done
