"""tests/conformance: the shipped suite on the selected targets, plus tests of the suite itself.

With no target selected (``python -m pytest tests``), the suite runs on ``numpy`` without the
10,000-node chains: the interpreter walks a level in ~25 ms, so one such chain takes about four
minutes. ``--cortex-target numpy --cortex-full`` runs them.
"""

from __future__ import annotations

import os

import pytest

from cortex.testing.targets import ENV_EXCLUDE, ENV_TARGETS


def pytest_configure(config: pytest.Config) -> None:
    chosen = config.getoption("cortex_target") or os.environ.get(ENV_TARGETS)
    excluded = config.getoption("cortex_exclude_family") or os.environ.get(ENV_EXCLUDE)
    if not chosen and not excluded and not config.getoption("cortex_full"):
        config.option.cortex_exclude_family.append("long_chain")
