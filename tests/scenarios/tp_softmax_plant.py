"""The second seed story's class of rule bug, planted for docs/watch.md: DTensor's softmax over a sharded dim
computed on each rank's local columns, without gathering the dim first (its rule claims the input's Shard).

Imported by every rank (``torchsleuth watch --nproc 2 --import tests/scenarios/tp_softmax_plant.py ...``); the
plant's text is tests/shard_plants.py's, shared with the shard and watch tests.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shard_plants import rule_plant  # noqa: E402

exec(rule_plant("reduced_dim_not_replicated"))
