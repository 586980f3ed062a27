"""The package's name on the package index, and the install command for each of its extras.

Pipeline position: beside the pipeline. Targets use :func:`pip_install` for the fix they
report when their Python dependency is missing (``cortex info``, ``TargetNotEnabledError``).
The distribution is ``cortex-compiler``: ``cortex`` on the package index is an unrelated
project, so ``pip install 'cortex[llvm]'`` would install something else. The import name,
the ``cortex`` command and the plugin namespace stay ``cortex``.

Where Cortex runs from a source checkout (an editable install of a clone), the command names
that checkout (``pip install -e '/path/to/clone[llvm]'``): it is what adds the extra to the
Cortex being run.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

DISTRIBUTION = "cortex-compiler"


@functools.lru_cache(maxsize=None)
def source_checkout() -> Path | None:
    """The source tree ``cortex`` is imported from (its ``pyproject.toml`` names this
    distribution), or None for an installed copy."""
    root = Path(__file__).resolve().parents[3]
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if re.search(rf'^name = "{DISTRIBUTION}"$', text, re.M) else None


def pip_install(*extras: str, checkout: Path | None | bool = True) -> str:
    """The command that installs Cortex with ``extras``: ``pip install 'cortex-compiler[llvm]'``,
    or ``pip install -e '/path/to/clone[llvm]'`` when running from a source checkout
    (``checkout=False``: always the package index's form)."""
    root = source_checkout() if checkout is True else (checkout or None)
    spec = f"[{','.join(extras)}]" if extras else ""
    if root is not None:
        return f"pip install -e '{root}{spec}'"
    return f"pip install '{DISTRIBUTION}{spec}'" if extras else f"pip install {DISTRIBUTION}"
