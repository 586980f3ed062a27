"""The core's modules moved into stage subpackages; their old import paths still work.

A plugin or notebook written against ``cortex.core.backend`` or ``cortex.core.loopir_verify``
gets the very module at its new place, with a DeprecationWarning that names the new path.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

from cortex.core._moved import MOVED


def test_every_new_path_exists_and_no_old_file_remains():
    for old, new in MOVED.items():
        module = importlib.import_module(new)
        assert module.__name__ == new
        assert importlib.util.find_spec(new).origin.endswith(new.replace(".", "/") + ".py")


def test_old_paths_give_the_same_modules_with_a_warning():
    # a fresh interpreter, so no old name was imported before
    code = (
        "import importlib, warnings\n"
        "from cortex.core._moved import MOVED\n"
        "for old, new in MOVED.items():\n"
        "    target = importlib.import_module(new)\n"
        "    with warnings.catch_warnings(record=True) as seen:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(old)\n"
        "    assert module is target, (old, module, target)\n"
        "    assert module.__spec__.name == new, module.__spec__.name\n"
        "    texts = [str(w.message) for w in seen if w.category is DeprecationWarning]\n"
        "    assert texts == [f'{old} moved to {new}; import it from there'], (old, texts)\n"
        "print(len(MOVED))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(len(MOVED))


def test_from_import_of_an_old_name_works():
    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "from cortex.core import render_c, backend\n"
            "from cortex.core.render import c_family\n"
            "from cortex.core.plugin import backend as b2\n"
            "assert render_c is c_family and backend is b2\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
