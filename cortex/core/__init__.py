"""The target-neutral core of Cortex, one subpackage per pipeline stage.

::

    frontend/   model API, trace, RecursiveGraph, params, float64 reference
    passes/     graph passes (RecursiveGraph -> RecursiveGraph)
    lowering/   recursion lowering and scheduling (-> LoopProgram), schedule knobs, transforms
    loopir/     the LoopProgram IR, its printer, verifier and interpreter
    render/     the C-family renderer and its dialect tables
    runtime/    the executable, outputs, host memory, token tables
    linearize/  structures -> index arrays (the host side of every call)
    plugin/     plugin loading, hook specs, targets, the backend contract, capabilities

``api`` is the front door (``cortex.compile``), ``pipeline`` lists every stage in order, and
``errors`` holds the error classes every stage raises. ``docs/architecture.md`` describes it.
"""

from cortex.core import _moved

_moved.install()
