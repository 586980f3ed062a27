"""Every compile option is documented where a user looks: ``cortex info`` (text and JSON) lists
the shared options with their defaults and every target's own options, and the README's
targets table names every option of every built-in target."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cortex import cli
from cortex.core.pipeline import SHARED_OPTIONS

pytestmark = pytest.mark.usefixtures("clean_plugins")
README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_info_lists_the_shared_options_with_defaults_and_allowed_values(capsys):
    assert set(SHARED_OPTIONS) >= {"dtype", "schedule", "passes", "max_table_mib", "dump"}
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "Shared options (every target)" in out
    for name in SHARED_OPTIONS:
        assert re.search(rf"^  option {name} \(default: [^)]+\): \S", out, re.M), name
    assert "option dtype (default: the model's dtype): one of 'float32', 'float64'" in out


def test_info_json_has_the_shared_options(capsys):
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [o["name"] for o in data["shared_options"]] == list(SHARED_OPTIONS)
    assert all(o["default"] and o["allowed"] for o in data["shared_options"])


def test_info_shows_each_target_option_with_what_it_does(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "option pin=False: a boolean — pin worker thread" in out


def test_the_readme_names_every_option_of_every_builtin_target(clean_plugins):
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)`[^\n]*\| ([^|\n]*) \|$",
                                                        README, re.M)}
    for target in clean_plugins.get_registry():
        if target.plugin not in {"cpu_llvm", "opencl", "cuda", "numpy_ref"}:
            continue
        for option in target.options:
            assert f"`{option.name}`" in rows[target.name], (target.name, option.name)
    for name in SHARED_OPTIONS:
        assert f"`{name}`" in README, name
