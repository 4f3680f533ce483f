#!/bin/bash
# A pointed run with hangs' kin set aside two ways, one after the other (bench/worker-start.md):
#   bash bench/hang_kin.sh [OP] [DTYPES]                kin off against on, twice ("off": a copy of src/ whose sweep passes
#                                                       no kin function to the pool; "on": src/ as it is)
#   OLD=DIR/src bash bench/hang_kin.sh [OP] [DTYPES]    kin per unit (DIR/src, a checkout of 21c2eb7) against kin per op
#                                                       (src/ as it is), once
# (default special.laguerre_polynomial_l float64; run from the repo root)
set -euo pipefail
op=${1:-special.laguerre_polynomial_l}; dtypes=${2:-float64}
root=$(pwd); work=$(mktemp -d)

measure() {  # LABEL SRC: the run, and one line on it
  local d="$work/run-${1// /-}"; mkdir -p "$d"; cd "$d"
  local s; s=$(date +%s.%N)
  PYTHONPATH="$2" "$root/.venv/bin/torchsleuth" ops --ops "$op" --dtypes "$dtypes" --timeout 10 --no-shrink > out.log 2>&1 || true
  local e; e=$(date +%s.%N)
  local db=torchsleuth-out/runs.db
  echo "kin $1: $(python3 -c "print(f'{$e - $s:.1f} s wall')"); $(grep -o '[0-9,]* cases in [0-9.]* s' out.log | head -1);" \
       "hangs $(sqlite3 "$db" "select count(*) from findings where kind='hang'");" \
       "${OLD:+collateral $(sqlite3 "$db" "select count(*) from notes where kind='collateral'"); }outcomes $(sqlite3 "$db" "select case_id||status from outcomes order by 1" | md5sum | cut -c1-8)"
}

if [ -n "${OLD:-}" ]; then
  measure "per unit" "$OLD"; measure "per op" "$root/src"
  exit 0
fi
cp -r "$root/src" "$work/off"
sed -i 's/, kin=edits.kin, /, /' "$work/off/torchsleuth/sweep.py"
grep -q "kin=edits.kin" "$work/off/torchsleuth/sweep.py" && { echo "could not turn kin off"; exit 1; }
for i in 1 2; do
  measure "off, run $i" "$work/off"; measure "on, run $i" "$root/src"
done
