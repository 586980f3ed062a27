"""The optional libraries of the distributed tests: present, skipped with the reason, or (when
``CORTEX_TEST_REQUIRE`` names ray, as ``.ci/run`` does) a failure, never a silent skip."""

from __future__ import annotations

import importlib
import os

import pytest

REQUIRED = "ray" in {n.strip() for n in os.environ.get("CORTEX_TEST_REQUIRE", "").split(",")}


def require(*modules: str) -> None:
    """Import ``modules`` or skip the calling test module (fail when ray is required)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            if REQUIRED:
                raise
            pytest.skip(f"{name} is not installed (the ray extra): {e}",
                        allow_module_level=True)
