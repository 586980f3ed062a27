"""The autotuner: search a model's schedule space on a workload, keep the winners as records.

Pipeline position: beside the pipeline (``docs/tuning.md``). ``cortex.tune(model, target,
workload=..., budget=...)`` (:func:`cortex.tuning.tuner.tune`; the package is named
``tuning`` so that ``cortex.tune`` stays that function) measures candidate schedules and stores the fastest one that
matches the float64 reference as a tuning record; ``cortex.compile`` (``schedule="auto"``, the
default) reads the records. ``cortex tune`` is the command line.

Modules: ``workload`` (batches and the workload class), ``fingerprint`` (graph and device
keys), ``records`` (the SQLite database, JSON lines), ``measure`` (compile, check, interleaved
timing), ``worker`` (measuring in a worker process with timeouts), ``cost_model`` (features
and the learned model), ``search`` (random and model-guided proposals), ``tuner`` (the
session), ``cli``. Importing this package imports none of the heavy ones: the compile's
read path (``records``) needs only ``sqlite3``, the search needs scikit-learn (the ``tune``
extra).
"""

from __future__ import annotations

from typing import Any

__all__ = ["tune", "Budget", "TuneResult", "Workload", "WorkloadSpec", "RecordStore", "Record",
           "db_path"]

_LAZY = {
    "tune": "cortex.tuning.tuner", "Budget": "cortex.tuning.tuner", "TuneResult": "cortex.tuning.tuner",
    "Workload": "cortex.tuning.workload", "WorkloadSpec": "cortex.tuning.workload",
    "RecordStore": "cortex.tuning.records", "Record": "cortex.tuning.records",
    "db_path": "cortex.tuning.records",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cortex.tuning' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
