"""The front end: from a user's model to the RecursiveGraph IR and its float64 oracle.

Pipeline position: the first stage. :mod:`~cortex.core.frontend.model` is the API models are
written in; :mod:`~cortex.core.frontend.trace` records a model's cases into a
:class:`~cortex.core.frontend.graph.RecursiveGraph`; :mod:`~cortex.core.frontend.params` binds
the model's weights (and the derived params graph passes introduce) to a graph, and loads them
from ``.npz`` or PyTorch; :mod:`~cortex.core.frontend.reference` evaluates a graph in float64
NumPy, the oracle every later stage is checked against. Errors of this stage are in
:mod:`~cortex.core.frontend.model_errors`. Graph passes live beside it, in
:mod:`cortex.core.passes`.
"""
