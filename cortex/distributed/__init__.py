"""Corpus-scale inference on Ray: a compiled model over a Ray Dataset, into one Parquet file.

Pipeline position: beside the pipeline, on top of it. A run ships an *executable source*
(:mod:`~cortex.distributed.sources`: a model, a target and options — small and picklable) to a
pool of Ray actors; each actor compiles it once for its own CPU
(:mod:`~cortex.distributed.worker`), reads each row's structure in the form the row holds
(:mod:`~cortex.distributed.rows`: Python source, s-expressions, parent arrays, any Python
structure) and returns root states as fixed-size list columns; the driver commits them to one
Parquet file with every input id exactly once (:mod:`~cortex.distributed.commit`).
:mod:`~cortex.distributed.job` ties these together; :mod:`~cortex.distributed.inputs` and
:mod:`~cortex.distributed.command` are ``cortex run``. ``docs/distributed.md`` is the guide.

Ray is an optional dependency (``pip install 'cortex-compiler[ray]'``); importing this package does not
import it.
"""

from cortex.distributed.commit import CommitError, CommitReport, ExactlyOnceWriter
from cortex.distributed.inputs import parquet_rows, python_rows, to_dataset
from cortex.distributed.job import RowError, RunReport, run_inference
from cortex.distributed.progress import Progress
from cortex.distributed.rows import FORMS, to_structure
from cortex.distributed.sources import CompileRecipe, ExecutableSource, model_from_spec
from cortex.distributed.worker import InferenceWorker

__all__ = [
    "run_inference", "RunReport", "CompileRecipe", "ExecutableSource", "model_from_spec",
    "InferenceWorker", "RowError", "ExactlyOnceWriter", "CommitError", "CommitReport",
    "Progress", "FORMS", "to_structure", "python_rows", "parquet_rows", "to_dataset",
]
