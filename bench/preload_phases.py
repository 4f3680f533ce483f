"""How long each phase of the fork server's preload (workers.preload) takes, in one fresh process beside a GPU:
importing torch and torchsleuth.sweep, the load tried in a forked child, the server's own load.

    python bench/preload_phases.py
"""

from __future__ import annotations

import json
import os
import time

T0 = time.monotonic()
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
import torch  # noqa: E402,F401  (its import is timed)

import torchsleuth  # noqa: E402
import torchsleuth.sweep  # noqa: E402,F401  (what the server preloads first)

imported = time.monotonic() - T0
source = open(os.path.join(os.path.dirname(torchsleuth.__file__), "run", "preload.py")).read()
top = source[:source.index("if not torch.cuda.is_available():")]  # the functions, not the load the module makes
namespace = {"__name__": "torchsleuth.workers._phases", "__package__": "torchsleuth.workers"}
exec(compile(top, "preload.py", "exec"), namespace)
capability = namespace["_nvml_capability"]()
t = time.monotonic()
child = namespace["tried_in_a_child"](lambda: namespace["load_catalog_beside_a_gpu"](capability))
in_child = time.monotonic() - t
t = time.monotonic()
own = namespace["load_catalog_beside_a_gpu"](capability)
loaded = time.monotonic() - t
print(json.dumps({"import_s": round(imported, 2), "child_s": round(in_child, 2), "child_ok": child, "own_s": round(loaded, 2),
                  "own_ok": own, "safe": namespace["safe_to_fork"](), "capability": capability}))
