"""Installing cortex-cc into a fresh virtual environment adds the ``cc`` target to
``cortex info`` and ``cortex.compile``; uninstalling removes it.

The fresh venv gets cortex, numpy and pluggy from this environment through a ``.pth`` file
(no network), and cortex-cc as a wheel built here, installed with pip like any plugin.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

CONTRIB = Path(__file__).parents[1]

CHECK = """
import cortex
from cortex.models import TreeRNN
exe = cortex.compile(TreeRNN(hidden=4, vocab=11, seed=2), target="cc")
print("ROOT", exe([(1, 2)]).root("h").shape)
"""


def _module_dir(name: str) -> Path:
    return Path(importlib.util.find_spec(name).origin).parent


def _can_build_wheels() -> bool:
    if importlib.util.find_spec("setuptools") is None:
        return False
    if importlib.util.find_spec("wheel") is not None:
        return True
    import setuptools

    return tuple(int(x) for x in setuptools.__version__.split(".")[:2] if x.isdigit()) >= (70, 1)


def run(*cmd: str, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done


def test_install_and_uninstall_in_a_fresh_venv(tmp_path):
    if not _can_build_wheels():
        pytest.skip(reason="building the wheel offline needs setuptools with bdist_wheel "
                           "(setuptools >= 70.1, or the wheel package) in this environment")
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
        "--disable-pip-version-check", str(CONTRIB), "-w", str(wheels))
    wheel = next(wheels.glob("cortex_cc-*.whl"))

    # a fresh venv that sees only cortex, numpy and pluggy from here (linked into one folder)
    home = tmp_path / "venv"
    venv.create(home, with_pip=True)
    python = str(home / "bin" / "python")
    shim = tmp_path / "shim"
    shim.mkdir()
    for name in ("cortex", "numpy", "pluggy"):
        (shim / name).symlink_to(_module_dir(name), target_is_directory=True)
    libs = _module_dir("numpy").parent / "numpy.libs"
    if libs.exists():
        (shim / "numpy.libs").symlink_to(libs, target_is_directory=True)
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    Path(site, "cortex_shim.pth").write_text(str(shim) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_", "PYTHON"))}
    env["CORTEX_CC_CACHE"] = str(tmp_path / "cache")

    before = run(python, "-m", "cortex", "info", env=env).stdout
    assert "cc —" not in before and "numpy —" in before

    run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
        "--disable-pip-version-check", str(wheel), env=env)
    info = run(python, "-m", "cortex", "info", env=env).stdout
    assert "cc 0.1.0  [entry point: cortex_cc]" in info
    assert "cc — plain C from the core renderer" in info
    assert "ROOT (1, 4)" in run(python, "-c", CHECK, env=env).stdout

    run(python, "-m", "pip", "uninstall", "--quiet", "--yes", "cortex-cc", env=env)
    after = run(python, "-m", "cortex", "info", env=env).stdout
    assert "cc —" not in after and "cortex_cc" not in after
    gone = subprocess.run([python, "-c", CHECK], capture_output=True, text=True, env=env)
    assert gone.returncode != 0 and "unknown target 'cc'" in gone.stderr
