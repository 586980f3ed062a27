"""C-family rendering: a scheduled LoopProgram as C, OpenCL C or CUDA C source.

Pipeline position: the code generation stage, for backends whose language is in the C family.
:mod:`~cortex.core.render.c_family` is the one renderer; :mod:`~cortex.core.render.dialects`
holds what each dialect spells differently, as small tables. (The ``llvm`` backend generates
LLVM IR itself, in its plugin.)
"""
