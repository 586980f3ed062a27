"""Errors of the model frontend (model API, tracing, parameter files).

Pipeline position: raised by ``cortex.core.frontend.model``, ``cortex.core.frontend.trace`` and
``cortex.core.frontend.params`` before anything is lowered or compiled, so a bad model is reported at
trace time with the model, the case and the offending op named in the message.
"""

from __future__ import annotations


class TraceError(ValueError):
    """A model's case could not be traced: shape mismatch, unknown op, arity misuse, ..."""

    def __init__(self, message: str, *, model: str = "?", case: str = "?", op: str | None = None):
        self.model, self.case, self.op = model, case, op
        where = f"model {model!r}, case {case!r}"
        if op is not None:
            where += f", op {op!r}"
        super().__init__(f"{where}: {message}")


class ModelDefinitionError(ValueError):
    """A model declares something inconsistent (duplicate names, bad shapes or dtypes)."""


class ParamError(ValueError):
    """Parameters given, loaded or imported don't match the model (missing/extra names,
    shapes, dtypes, an unsupported PyTorch module layout)."""
