"""The pytest plugin of the conformance suite: options, target selection, parametrization.

Pipeline position: outside the pipeline; it drives the shipped tests in
``cortex.testing.test_conformance`` (and any module that imports them) against the selected
targets. Loaded automatically through the ``pytest11`` entry point once ``cortex`` is
installed, or explicitly with ``-p cortex.testing.plugin``.

Usage::

    python -m pytest --pyargs cortex.testing --cortex-target cc          # a plugin's target
    python -m pytest --pyargs cortex.testing --cortex-target llvm,opencl --cortex-full
    CORTEX_TEST_TARGETS=all python -m pytest --pyargs cortex.testing      # every enabled target

Tests ask for one of the fixtures ``cortex_compile_case``, ``cortex_reference_case``,
``cortex_differential_case``, ``cortex_contract_case`` or ``cortex_nonfinite_case`` and get one
test per case
(:mod:`cortex.testing.cases`). The plugin touches nothing else, so loading it into an unrelated
pytest run only adds the options.
"""

from __future__ import annotations

import pytest

from cortex.testing.targets import ENV_EXCLUDE, ENV_FULL, ENV_TARGETS, TargetSelectionError

FIXTURES = {
    "cortex_compile_case": "compile",
    "cortex_reference_case": "reference",
    "cortex_differential_case": "differential",
    "cortex_contract_case": "contract",
    "cortex_nonfinite_case": "nonfinite",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cortex", "Cortex conformance suite (cortex.testing)")
    group.addoption("--cortex-target", action="append", default=[], metavar="NAME",
                    help=f"run the conformance suite on target NAME (repeatable or a comma "
                         f"list; 'all' = every enabled target). Default: ${ENV_TARGETS}, "
                         f"else numpy")
    group.addoption("--cortex-full", action="store_true", default=False,
                    help=f"the exhaustive sweep: float64 differentials, random schedules and "
                         f"the 10,000-node chain for every model (or ${ENV_FULL}=1)")
    group.addoption("--cortex-exclude-family", action="append", default=[], metavar="FAMILY",
                    help=f"leave out the reference cases of a structure family (repeatable or "
                         f"a comma list), e.g. long_chain on a slow target (or ${ENV_EXCLUDE})")


def _targets(config: pytest.Config) -> tuple[str, ...]:
    from cortex.testing.targets import parse_targets, status

    cached = getattr(config, "_cortex_targets", None)
    if cached is None:
        try:
            names = parse_targets(config.getoption("cortex_target"))
            cached = tuple(status(n).name for n in names)
        except TargetSelectionError as e:
            raise pytest.UsageError(str(e)) from None
        config._cortex_targets = cached  # type: ignore[attr-defined]
    return cached


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    from cortex.testing.cases import cases
    from cortex.testing.targets import excluded_families, full_sweep

    for fixture, kind in FIXTURES.items():
        if fixture in metafunc.fixturenames:
            try:
                exclude = excluded_families(metafunc.config.getoption("cortex_exclude_family"))
            except TargetSelectionError as e:
                raise pytest.UsageError(str(e)) from None
            listed = cases(kind, _targets(metafunc.config),
                           full_sweep(metafunc.config.getoption("cortex_full")), exclude)
            metafunc.parametrize(fixture, listed, ids=[c.id for c in listed])


def pytest_configure(config: pytest.Config) -> None:
    """Check an explicit target selection up front: a clean usage error, before collection."""
    import os

    if config.getoption("cortex_target") or os.environ.get(ENV_TARGETS):
        _targets(config)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    import os

    if not (config.getoption("cortex_target") or os.environ.get(ENV_TARGETS)):
        return None
    from cortex.testing.targets import status

    lines = []
    for name in _targets(config):
        st = status(name)
        lines.append(f"cortex target {name}: " +
                     ("runs here" if st.runnable else f"compile-only here ({st.reason})"))
    return lines
