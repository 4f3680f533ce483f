#!/bin/bash
# Device call of the 2026-12-03 (second) session (1x H200, torch 2.11): workers outside an NVIDIA MPS server
# (devices.outside_mps). With a server running: is its control pipe where we look; does a process pointed away from
# it survive another's device fault that ends an MPS client; then the crash-heavy units and every 10th op as timelines,
# their workers outside the server. The daemon is stopped at the end.
set -u
OUT=${1:?out dir}
W=/tmp/batch18; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
nvidia-cuda-mps-control -d
{ ls -la /tmp/nvidia-mps; python3 -c "from torchsleuth import devices; print('mps_pipe', devices.mps_pipe()); print('outside_mps', devices.outside_mps('cuda'))"; } > $OUT/mps.txt 2>&1
cat > $W/fault.py <<'PY'
import sys, time, torch
if sys.argv[1] == "fault":
    time.sleep(3)
    x = torch.zeros(4, device="cuda"); i = torch.tensor([1 << 40], device="cuda")
    try: x[i] = 1; torch.cuda.synchronize(); print("fault: no error")
    except Exception as e: print("fault:", type(e).__name__, str(e).splitlines()[0])
else:
    a = torch.randn(2048, 2048, device="cuda"); n = 0; end = time.time() + 8
    try:
        while time.time() < end: a = (a @ a).tanh_(); torch.cuda.synchronize(); n += 1
        print("worker: survived,", n, "matmuls")
    except Exception as e: print("worker: died after", n, "matmuls:", type(e).__name__, str(e).splitlines()[0])
PY
for how in client outside; do
  env=""; [ $how = outside ] && env="CUDA_MPS_PIPE_DIRECTORY=$(python3 -c "from torchsleuth import devices; print(devices.outside_mps('cuda')['CUDA_MPS_PIPE_DIRECTORY'])")"
  echo "### both processes: $how" >> $OUT/mps.txt
  env $env python3 $W/fault.py work >> $OUT/mps.txt 2>&1 & env $env python3 $W/fault.py fault >> $OUT/mps.txt 2>&1; wait
done
OPS=$(python3 -c "
import sys; sys.path.insert(0, 'bench')
from sweep_profile import op_sample
print(','.join(o for o in op_sample(None, 10) if 'laguerre' not in o and 'legendre' not in o))")
for run in tail subset; do
  ops=$OPS; [ $run = tail ] && ops=addbmm,baddbmm,torch.ops.aten._flash_attention_forward
  timeout 120 python3 bench/catalog_timeline.py --device cuda --ops "$ops" --out $W/$run > /dev/null 2>&1
  echo "### $run (MPS server running, workers outside it)" >> $OUT/runs.txt
  python3 bench/catalog_timeline.py --read $W/$run 2>&1 | sed -n '1,4p;/collateral/p' >> $OUT/runs.txt
  python3 -c "import sqlite3,sys; print([d for (d,) in sqlite3.connect(sys.argv[1]).execute(\"select detail from notes where kind='executor'\")])" $W/$run/runs.db >> $OUT/runs.txt
done
echo quit | nvidia-cuda-mps-control
cat $OUT/mps.txt $OUT/runs.txt
