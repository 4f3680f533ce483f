#!/bin/bash
# Device call 1 of the 2026-12-02 session (1x H200, torch 2.11): the search (values, arguments, long, overloads)
# on CUDA, pointed (deep by default) at ops whose kernels have vectorised, scanned or reduced paths.
set -u
OUT=${1:?out dir}
W=/tmp/batch7; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OPS=${OPS:-exp,exp2,expm1,sinh,cosh,tanh,sigmoid,log1p,logit,erfinv,pow,atan2,hypot,addcmul,addcdiv,lerp,clamp,nan_to_num,cumsum,cumprod,logcumsumexp,cummax,sum,prod,mean,var,std,norm,amax,softmax,log_softmax,logsumexp,nn.functional.gelu,nn.functional.silu,nn.functional.elu,nn.functional.softplus,nn.functional.layer_norm,sort,topk,div}
(/usr/bin/time -v timeout ${SEARCH_S:-520} python3 -m torchsleuth.cli.main ops --device cuda --ops $OPS --depth deep \
    --workers 8 --no-progress --out $W/search --json $W/search.json > $W/search.txt 2>&1; echo "exit $?" >> $W/search.txt)
rm -rf $W/*/repros
tar czf $OUT/batch7.tgz -C /tmp batch7
