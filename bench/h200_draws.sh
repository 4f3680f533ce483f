#!/bin/bash
# Run in the twelfth session (bench/draws.md, "On an H200"): the random ops pointed at on CUDA, with the draws check and
# the draws search (the default depth of a pointed run), to see that real CUDA draws pass and what fails.
#   bash bench/h200_draws.sh $OUT
set -u
OUT=${1:?out dir}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
timeout 180 python3 -c "import sys; from torchsleuth.cli.main import main; sys.exit(main())" ops --device cuda --ops bernoulli,normal,multinomial,normal.number_mean,bernoulli_,randint_like,rand_like,randn_like \
  --out $OUT/run --json $OUT/run/findings.json --no-progress > $OUT/run.txt 2>&1
echo "exit $?"
head -c 6000 $OUT/run.txt
cd $OUT/run && rm -rf repros runs.workers.log
exit 0
