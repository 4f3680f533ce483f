"""Two processes beside an NVIDIA MPS server (bench/h200_batch19.sh): `work` runs matmuls for 8 s, `fault` stores to a
wild address from a Triton kernel after 3 s (an illegal address). Does `work` survive?"""

import sys
import time
import torch

if sys.argv[1] == "fault":
    import triton
    import triton.language as tl

    @triton.jit
    def wild(p):
        tl.store(p + (1 << 40), 1.0)

    time.sleep(3)
    x = torch.zeros(4, device="cuda")
    try:
        wild[(1,)](x)
        torch.cuda.synchronize()
        print("fault: no error")
    except Exception as e:
        print("fault:", type(e).__name__, str(e).splitlines()[0])
else:
    a = torch.randn(2048, 2048, device="cuda")
    n = 0
    end = time.time() + 8
    try:
        while time.time() < end:
            a = (a @ a).tanh_()
            torch.cuda.synchronize()
            n += 1
        print("worker: survived,", n, "matmuls")
    except Exception as e:
        print("worker: died after", n, "matmuls:", type(e).__name__, str(e).splitlines()[0])
