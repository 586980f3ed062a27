"""Test plugin: two targets built on the numpy backend, to test the suite itself.

* ``broken`` — runs correctly, then perturbs ONE element of the first output buffer by 0.25;
  the suite must catch it with a readable report.
* ``nodevice`` — enabled but not runnable ("no device in this test"): the suite must run its
  compile-only part and report the run part as skipped with that reason.
"""

from __future__ import annotations

from typing import Any


from cortex import Availability, Backend, Target, hookimpl
from cortex.plugins.numpy_ref.backend import create_backend as numpy_backend
from cortex.plugins.numpy_ref.backend import InterpreterRuntime

PERTURBED_ELEMENT = 7  # flat index into the first output buffer
PERTURBATION = 0.25


class PerturbingRuntime(InterpreterRuntime):
    def launch(self, artifact: Any, args: tuple[Any, ...], **config: Any) -> None:
        super().launch(artifact, args, **config)
        for buf, arr in zip(artifact.buffers, args):
            if buf.role == "output":
                flat = arr.reshape(-1)
                flat[min(PERTURBED_ELEMENT, flat.size - 1)] += PERTURBATION
                return


def broken_backend(options: Any) -> Backend:
    good = numpy_backend(options)
    return Backend(good.capabilities, good.renderer, good.compiler, PerturbingRuntime())


NO_DEVICE = "no device in this test"


@hookimpl
def cortex_register_targets(registry: Any) -> None:
    registry.add(Target(name="broken", description="numpy, one output element perturbed",
                        backend=broken_backend))
    registry.add(Target(name="nodevice", description="numpy backend, not runnable",
                        backend=numpy_backend,
                        runnable=lambda: Availability.no(NO_DEVICE, "nothing to fix")))
