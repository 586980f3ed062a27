"""The package's name on the package index, and the install command for each of its extras.

Pipeline position: beside the pipeline. Targets use :func:`pip_install` for the fix they
report when their Python dependency is missing (``cortex info``, ``TargetNotEnabledError``).
The distribution is ``cortex-compiler``: ``cortex`` on the package index is an unrelated
project, so ``pip install 'cortex[llvm]'`` would install something else. The import name,
the ``cortex`` command and the plugin namespace stay ``cortex``.
"""

from __future__ import annotations

DISTRIBUTION = "cortex-compiler"


def pip_install(*extras: str) -> str:
    """The command that installs Cortex with ``extras``: ``pip install 'cortex-compiler[llvm]'``."""
    if not extras:
        return f"pip install {DISTRIBUTION}"
    return f"pip install '{DISTRIBUTION}[{','.join(extras)}]'"
