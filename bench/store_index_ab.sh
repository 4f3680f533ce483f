#!/bin/bash
# The whole catalog's sweep stage on this CPU (bench/catalog_timeline.py: --no-shrink, one worker per core), with an
# older tree and then the working tree, one after the other: what the store's index on outcomes by unit (340a16a)
# saves the process that hands out units.
#
#   OLD=DIR/src bash bench/store_index_ab.sh OUT     # DIR: `git archive 428b627 | tar x -C DIR`
set -u
OUT=${1:?out dir}
OLD=${OLD:?OLD=the older tree\'s src}
mkdir -p $OUT
for run in old new; do
  src=$PWD/src; [ $run = old ] && src=$OLD
  rm -rf $OUT/$run
  PYTHONPATH=$src .venv/bin/python bench/catalog_timeline.py --device cpu --out $OUT/$run > /dev/null 2>&1
  echo "### $run" >> $OUT/ab.txt
  PYTHONPATH=$PWD/src .venv/bin/python bench/catalog_timeline.py --read $OUT/$run 2>&1 | sed -n '1,4p' >> $OUT/ab.txt
done
cat $OUT/ab.txt
