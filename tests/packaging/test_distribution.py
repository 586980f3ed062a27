"""The distribution: its name, license and metadata, what the sdist carries, and every install
hint naming it (the name `cortex` on the package index belongs to an unrelated project)."""

from __future__ import annotations

import re
from pathlib import Path


from cortex.core.plugin.distribution import DISTRIBUTION, pip_install, source_checkout

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = (ROOT / "pyproject.toml").read_text()
# `pip install 'cortex[...]'` / `cortex[...]` as a requirement: the unrelated project's name
WRONG_NAME = re.compile(r"""(?<![\w-])cortex\[""")


def test_the_distribution_name_is_the_one_every_hint_uses():
    assert re.search(rf'^name = "{DISTRIBUTION}"$', PYPROJECT, re.M)
    assert pip_install("llvm", checkout=False) == "pip install 'cortex-compiler[llvm]'"
    assert pip_install(checkout=False) == "pip install cortex-compiler"
    assert pip_install("llvm", "test", checkout=False) == "pip install 'cortex-compiler[llvm,test]'"
    clone = Path("/src/cortex clone")
    assert pip_install("llvm", checkout=clone) == "pip install -e '/src/cortex clone[llvm]'"


def test_from_a_checkout_the_fix_installs_into_that_checkout():
    assert source_checkout() in (ROOT, None)  # None: imported from an installed copy
    if source_checkout() is not None:
        assert pip_install("opencl") == f"pip install -e '{ROOT}[opencl]'"


def _user_facing_files() -> list[Path]:
    return sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("contrib/*/*.md"),
                   *ROOT.glob("contrib/*/pyproject.toml"), ROOT / "pyproject.toml",
                   ROOT / "tox.ini", *(ROOT / "cortex").rglob("*.py"),
                   *(p for p in (ROOT / "tests").rglob("*.py") if p != Path(__file__))])


def test_no_file_tells_users_to_install_the_unrelated_cortex():
    wrong = []
    for path in _user_facing_files():
        text = path.read_text()
        if path.name == "distribution.py":  # explains the name by quoting the wrong command
            text = text.replace("so ``pip install 'cortex[llvm]'`` would install something else", "")
        if WRONG_NAME.search(text):
            wrong.append(str(path.relative_to(ROOT)))
    assert len(_user_facing_files()) > 50
    assert not wrong, f"these say cortex[...]; use {DISTRIBUTION}[...]: {wrong}"


def test_the_fix_of_a_target_without_its_package_names_this_distribution(monkeypatch):
    from cortex.plugins.cpu_llvm import target as llvm_target
    from cortex.plugins.opencl import target as opencl_target

    for module, extra in ((llvm_target, "llvm"), (opencl_target, "opencl")):
        monkeypatch.setattr(module, "PACKAGE", "no_such_package_here")
        state = module.enabled()
        assert not state and state.fix == pip_install(extra)
        assert state.fix.endswith(f"[{extra}]'") and (DISTRIBUTION in state.fix or "-e " in state.fix)


def test_license_and_metadata():
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert 'license = "Apache-2.0"' in PYPROJECT and 'license-files = ["LICENSE"]' in PYPROJECT
    assert 'requires-python = ">=3.10"' in PYPROJECT
    for version in ("3.10", "3.13"):  # the oldest and newest supported, both in CI (.ci/run)
        assert f'"Programming Language :: Python :: {version}"' in PYPROJECT


def test_the_sdist_carries_tests_docs_and_license():
    lines = {tuple(line.split()) for line in (ROOT / "MANIFEST.in").read_text().splitlines()
             if line.strip() and not line.startswith("#")}
    assert ("include", "LICENSE", "README.md", "tox.ini", ".ci/run") in lines
    for tree in ("docs", "tests", "benchmarks", "tools", "contrib"):
        assert ("graft", tree) in lines
