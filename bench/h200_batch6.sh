#!/bin/bash
# Device call 3 of the 2026-11-30 session (1x H200, torch 2.11): the large oracle's rows and
# indexing forms over the catalog on CUDA (float32, float16), memory-checked probes.
set -u
OUT=${1:?out dir}
W=/tmp/batch6; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
(/usr/bin/time -v timeout ${LARGE_S:-400} python3 -m torchsleuth.cli.main ops --device cuda --large rows,index \
    --dtypes float32,float16 --variants functional --layouts contiguous --workers 6 --no-progress \
    --out $W/large --json $W/large.json > $W/large.txt 2>&1; echo "exit $?" >> $W/large.txt)
rm -rf $W/*/repros
tar czf $OUT/batch6.tgz -C /tmp batch6
