"""Errors of the model frontend (model API, tracing, parameter files).

Pipeline position: raised by ``cortex.core.frontend.model``, ``cortex.core.frontend.trace`` and
``cortex.core.frontend.params`` before anything is lowered or compiled, so a bad model is reported at
trace time with the model, the case and the offending op named in the message.
"""

from __future__ import annotations

from cortex.core.errors import CortexError


class TraceError(CortexError, ValueError):
    """A model's case could not be traced: shape mismatch, unknown op, arity misuse, ..."""

    def __init__(self, message: str, *, model: str = "?", case: str = "?", op: str | None = None):
        self.model, self.case, self.op = model, case, op
        where = f"model {model!r}, case {case!r}"
        if op is not None:
            where += f", op {op!r}"
        super().__init__(f"{where}: {message}")


class ModelDefinitionError(CortexError, ValueError):
    """A model declares something inconsistent (duplicate names, bad shapes or dtypes)."""


class ModelArgumentTypeError(ModelDefinitionError, TypeError):
    """A model argument of the wrong type: a float, a string or a bool where a size belongs."""


class ParamError(CortexError, ValueError):
    """Parameters given, loaded or imported don't match the model (missing/extra names,
    shapes, dtypes, an unsupported PyTorch module layout)."""
