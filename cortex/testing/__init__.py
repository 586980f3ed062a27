"""``cortex.testing``: the conformance suite every Cortex target must pass, ours and plugins'.

Pipeline position: outside the pipeline; it compiles the model zoo for a target, runs it on
every structure family in float32 and float64, and compares every state at every node with the
float64 reference under a documented tolerance table (``docs/conformance.md``).

Run it::

    python -m pytest --pyargs cortex.testing --cortex-target NAME [--cortex-full]

Modules, one job each:

* :mod:`~cortex.testing.zoo`        — the models (small sizes);
* :mod:`~cortex.testing.structures` — the structure families, in user-facing forms;
* :mod:`~cortex.testing.cases`      — the case generator (models x families x dtypes x schedules);
* :mod:`~cortex.testing.build`      — schedule variants, cached executables, compile-only builds;
* :mod:`~cortex.testing.tolerance`  — the tolerance table, the comparison and the report;
* :mod:`~cortex.testing.runner`     — one case: compile, run, compare;
* :mod:`~cortex.testing.targets`    — target selection and compile-only detection;
* :mod:`~cortex.testing.plugin`     — the pytest plugin;
* :mod:`~cortex.testing.test_conformance` — the tests themselves.
"""

from cortex.testing.cases import Case
from cortex.testing.structures import FAMILIES, family
from cortex.testing.tolerance import TOLERANCES, ConformanceFailure, Tolerance, check

__all__ = ["Case", "FAMILIES", "family", "TOLERANCES", "Tolerance",
           "ConformanceFailure", "check"]
