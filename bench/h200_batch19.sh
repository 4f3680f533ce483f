#!/bin/bash
# Device call of the 2026-12-03 (second) session, after h200_batch18.sh: the same two processes beside an NVIDIA MPS
# server, the faulting one now storing to a wild address (a Triton kernel: an illegal address, not a device-side
# assert): does the other process die with it as an MPS client, and survive outside the server (devices.outside_mps)?
set -u
# (the fault script ran as .whl/mpsfault.py then; it is bench/mps_fault.py now, the same code)
OUT=${1:?out dir}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src
nvidia-cuda-mps-control -d
for how in client outside; do
  env=""; [ $how = outside ] && env="CUDA_MPS_PIPE_DIRECTORY=$(python3 -c "from torchsleuth import devices; print(devices.outside_mps('cuda')['CUDA_MPS_PIPE_DIRECTORY'])")"
  echo "### both processes: $how"
  env $env python3 bench/mps_fault.py work 2>&1 & env $env python3 bench/mps_fault.py fault 2>&1 | tail -2; wait
done > $OUT/fault.txt
echo quit | nvidia-cuda-mps-control
cat $OUT/fault.txt
