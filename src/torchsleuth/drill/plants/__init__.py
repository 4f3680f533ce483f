"""One module per drill class; importing it plants that class's fault in the importing process.

Design note. These modules are meant only for ``SweepConfig.imports``, so
that the fault lives in a sweep worker and dies with it. Nothing in
the package imports them (this ``__init__`` stays empty on purpose), and
the drill always sweeps with worker processes: ``workers=0`` would load a
plant into the caller's own process.
"""
