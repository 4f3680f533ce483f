"""The chain plants of tests/inductor_plants.py (``CHAIN_PLANTS``: a ``sum`` that loses a non-power-of-two tail only
where a pointwise op is fused into it, a ``sin`` that reads an in-graph view as contiguous), planted for the life of
the process that runs this file: a pointed run's ``--import tests/inductor_chain_plants.py`` (each worker loads it;
bench/compiled-chains.md), or a repro script run after ``runpy.run_path`` of it (tests/oracles/test_oracle_compile_chains.py).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import inductor_plants  # noqa: E402  (by its name: it plants nothing itself then)

inductor_plants.plant(inductor_plants.CHAIN_PLANTS)
