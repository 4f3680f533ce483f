"""The pytest plugin (entry point ``pytest11``): kernel tests that fail with torchsleuth's findings.

Design note. A thin layer over ``torchsleuth.check``; nothing is judged here.
Two ways in, one message out (``CheckResult.message``: the groups, their
diagnoses and repro scripts, or why nothing was judged), given to
``pytest.fail`` without a traceback, so a failure shows that message and
nothing of the plugin or the result's repr. A check writes no file unless
asked: with ``--torchsleuth-report PATH`` a failing check's repro scripts
are written into ``PATH/repros/`` at once and the message gives their
paths; without it, the message says how to have them:

* the fixture ``torchsleuth_check``: ``torchsleuth_check(op, samples, **options)``
  runs ``check`` and fails the test with every finding group, its diagnosis
  and its repro script; it returns the result when clean;
* the marker ``@pytest.mark.torchsleuth(op, samples=None, **options)``: the
  same check, run before the test's own body.

``--torchsleuth-report PATH`` writes, at the end of the session, the findings
file, the HTML report and the repro scripts of every check the session ran
(``check.session``). Importing this module imports neither torch nor
torchsleuth: pytest loads it for every session of every project that has
torchsleuth installed, so it costs nothing until a test asks for a check.
"""

from __future__ import annotations

import pytest

_RESULTS = pytest.StashKey[list]()
# A failure's line for a repro script not written ({name}: its file name).
KEEP = "not kept; run pytest with --torchsleuth-report DIR to write it as DIR/repros/{name}"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("torchsleuth", "torchsleuth: silent correctness bugs in your ops")
    group.addoption("--torchsleuth-report", metavar="PATH", default=None,
                    help="write the findings file, an HTML report and the repro scripts of every torchsleuth check of "
                         "the session into the folder PATH")


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "torchsleuth(op, samples=None, **options): check op with torchsleuth.check (its layouts, dtypes, searches and "
        "oracles) before the test runs; the test fails with the findings",
    )
    config.stash[_RESULTS] = []


def _check(config, op, samples=None, **options):
    """The check, failing the test with its message alone: no traceback through the plugin, no repr of the result."""
    __tracebackhide__ = True
    from torchsleuth.check import check
    from torchsleuth.errors import UsageError

    try:
        result = check(op, samples, **options)
    except UsageError as e:
        pytest.fail(f"torchsleuth: {e}", pytrace=False)
    config.stash[_RESULTS].append(result)
    if not result.clean:
        folder = config.getoption("--torchsleuth-report")
        kept = result.write_repros(folder) if folder and not result.repros else None  # out= given: its own paths
        pytest.fail(result.message(repros=kept, keep=KEEP), pytrace=False)
    return result


@pytest.fixture
def torchsleuth_check(request):
    """``torchsleuth_check(op, samples=None, **options)``: ``torchsleuth.check``, failing the test with its findings."""

    def run(op, samples=None, **options):
        __tracebackhide__ = True
        return _check(request.config, op, samples, **options)

    return run


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item) -> None:
    marker = item.get_closest_marker("torchsleuth")
    if marker is None:
        return
    if not marker.args and "op" not in marker.kwargs:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.torchsleuth needs the op to check as its first argument")
    options = dict(marker.kwargs)
    op = marker.args[0] if marker.args else options.pop("op")
    samples = marker.args[1] if len(marker.args) > 1 else options.pop("samples", None)
    _check(item.config, op, samples, **options)


def pytest_sessionfinish(session) -> None:
    folder = session.config.getoption("--torchsleuth-report")
    results = session.config.stash.get(_RESULTS, [])
    if not folder:
        return
    from torchsleuth.check.session import write

    written = write(results, folder)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        where = written.get("findings file", folder)
        reporter.write_line(f"torchsleuth: {len(results)} check(s); report in {folder} (findings file {where})")
