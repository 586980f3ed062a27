"""The host side of a compiled model: the executable, its outputs, host memory, token tables.

Pipeline position: the product of compilation and the path of every call.
:mod:`~cortex.core.runtime.executable` is ``exe(structures) -> Outputs``;
:mod:`~cortex.core.runtime.outputs` maps rows back to the user's nodes;
:mod:`~cortex.core.runtime.hostmem` allocates cache-line-aligned and lazily-committed arrays;
:mod:`~cortex.core.runtime.token_tables` fills tables indexed by token on first use.
"""
