"""Shared fixtures: a private disk cache for the session, a clean plugin system per test, and
temporary plugin distributions.

``clean_plugins`` forgets the process-wide plugins before and after a test and clears the
plugin environment switches, so tests that register plugins or set switches cannot leak into
others. ``make_distribution`` writes a real installed-distribution layout (a module plus a
``*.dist-info`` folder with ``METADATA`` and ``entry_points.txt``) into a temporary folder on
``sys.path``, which ``importlib.metadata`` discovers like any pip-installed plugin. Every test
session gets its own empty tuning-records database (``CORTEX_TUNE_DB``), so compiles take the
default rules whatever this machine has tuned.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest

PLUGIN_SAMPLES = Path(__file__).parent / "plugins"

# Test processes run beside each other on shared cores (pytest-xdist's workers, CI's suites in
# the background), where PoCL's workers pinned one per core lose badly (docs/opencl.md, "Both
# cores"): the tests start PoCL unpinned unless the caller set POCL_AFFINITY. The pinned
# defaults are tested where a test asks for them (test_opencl_workers, test_opencl_shared_levels,
# test_opencl_tree_groups), and the conformance suite (`--pyargs cortex.testing`, not this
# folder) runs the target with its defaults.
os.environ.setdefault("POCL_AFFINITY", "0")


@pytest.fixture(scope="session", autouse=True)
def private_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """The disk cache (cortex.core.diskcache) of this test session: a fresh private directory,
    never the user's; compiles within the session share it, as a user's processes would."""
    import os

    old = {k: os.environ.get(k) for k in ("CORTEX_CACHE_DIR", "CORTEX_CACHE")}
    os.environ["CORTEX_CACHE_DIR"] = str(tmp_path_factory.mktemp("cortex-cache"))
    os.environ.pop("CORTEX_CACHE", None)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def pytest_configure(config: pytest.Config) -> None:
    # Compiles read tuning records by default (schedule="auto"): every test gets an empty,
    # private records database, so no record on this machine changes what a test compiles.
    os.environ["CORTEX_TUNE_DB"] = str(Path(tempfile.mkdtemp(prefix="cortex-tune-")) / "records.sqlite")
    config.addinivalue_line(
        "markers",
        "hook(name): the test exercises the plugin hook spec `name` "
        "(checked by tests/core/test_hookspecs_documented.py)",
    )
    config.addinivalue_line(
        "markers",
        "alone: the test times something against the machine's other load, so it runs in a "
        "pytest run of its own, not beside other test workers (the README's test command: "
        "`-m 'not alone'` with `-n auto`, then `-m alone`)",
    )


class _WithoutAmbientEntryPoints:
    """``importlib.metadata`` as the plugin system sees it, minus the ``cortex.plugins`` entry
    points of distributions installed before the test (e.g. contrib/cortex-cc): tests count
    plugins and targets, and only the temporary distributions they make should add to them."""

    def __init__(self, real, group: str) -> None:
        self._real = real
        self._ambient = {(ep.name, ep.value) for ep in real.entry_points(group=group)}

    def entry_points(self, **selection):
        found = self._real.entry_points(**selection)
        return [ep for ep in found if (ep.name, ep.value) not in self._ambient]

    def __getattr__(self, name: str):
        return getattr(self._real, name)


@pytest.fixture
def clean_plugins(monkeypatch: pytest.MonkeyPatch):
    """A fresh plugin system for the test, with no plugin environment switch set and no
    third-party plugin that happens to be installed in the environment."""
    from cortex.core.plugin import loader as plugins

    for name in plugins.ENV_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(plugins, "metadata", _WithoutAmbientEntryPoints(plugins.metadata, plugins.ENTRY_POINT_GROUP))
    plugins.reset_plugins()
    yield plugins
    plugins.reset_plugins()


@pytest.fixture
def make_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """``make_distribution(dist, version, module, sample, entry_points)`` -> the sys.path folder.

    ``sample`` names a file in ``tests/plugins/`` copied in as ``module.py``; ``entry_points``
    maps entry-point names (group ``cortex.plugins``) to ``module`` or ``module:attr``.
    """
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    modules: list[str] = []

    def make(dist: str, version: str, module: str, sample: str,
             entry_points: dict[str, str]) -> Path:
        shutil.copy(PLUGIN_SAMPLES / sample, site / f"{module}.py")
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8")
        lines = ["[cortex.plugins]"] + [f"{name} = {value}" for name, value in entry_points.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        modules.append(module)
        importlib.invalidate_caches()
        return site

    yield make
    for module in modules:
        sys.modules.pop(module, None)
