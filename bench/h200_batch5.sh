#!/bin/bash
# Device call 2 of the 2026-11-30 session (1x H200, torch 2.11): the compile hangs of batch 4
# replayed with stacks dumped; sizes (with its layout forms) and repeat over the ufuncs and
# reductions on CUDA; the large oracle's long reductions on CUDA (LARGE_OPS: other ops).
set -u
OUT=${1:?out dir}
W=/tmp/batch5; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OPS=$(python3 -c "import warnings; warnings.simplefilter('ignore')
from torchsleuth.cases import opinfo
print(','.join(n for n, e in opinfo.catalog().items() if {c.__name__ for c in type(e).__mro__} & {'UnaryUfuncInfo','BinaryUfuncInfo','ReductionOpInfo'}))")
REDUCTIONS=$(python3 -c "import warnings; warnings.simplefilter('ignore')
from torchsleuth.cases import opinfo
print(','.join(n for n, e in opinfo.catalog().items() if 'ReductionOpInfo' in {c.__name__ for c in type(e).__mro__}))")
(timeout 420 python3 bench/compile_hang.py --device cuda --dump 60 > $W/hang.txt 2>&1; echo "exit $?" >> $W/hang.txt) &
(/usr/bin/time -v timeout 300 python3 -m torchsleuth.cli.main ops --device cuda --ops "$OPS" \
    --dtypes float32,float64,float16,bfloat16,int64,bool --variants functional --layouts contiguous \
    --oracles sizes,repeat --workers 6 --no-progress --out $W/sizes --json $W/sizes.json > $W/sizes.txt 2>&1
 echo "exit $?" >> $W/sizes.txt) &
(/usr/bin/time -v timeout 420 python3 -m torchsleuth.cli.main ops --device cuda --large --ops "${LARGE_OPS:-$REDUCTIONS}" \
    --oracles large --dtypes float32,float16 --variants functional --layouts contiguous --workers 3 --no-progress \
    --out $W/large --json $W/large.json > $W/large.txt 2>&1; echo "exit $?" >> $W/large.txt) &
wait
rm -rf $W/*/repros
tar czf $OUT/batch5.tgz -C /tmp batch5
