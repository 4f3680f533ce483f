"""The oracle plug-ins torchsleuth ships: one folder each.

Design note. Each folder is one oracle: ``oracle.py`` plans and judges its
cases and defines ``ORACLE`` (a ``judge.plugin.Oracle``), ``script.py``
writes the standalone repro script of one of its findings, and any other
module is the oracle's own. An oracle imports only the floors at or below
the judge (cases, run, judge) and the repro kit (scripts), never the
engine, the sweep, the reports or a sibling oracle. The registry of the
built-in ones is ``judge.plugin.BUILTIN``; nothing imports this package but
the registry, by module path.
"""
