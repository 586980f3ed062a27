"""A small third-party Cortex plugin, shaped like one a separate distribution would ship.

The tests copy this file into a temporary distribution (see ``make_distribution`` in
``tests/conftest.py``) and discover it through the ``cortex.plugins`` entry-point group.
"""

from __future__ import annotations

from cortex import Availability, NotYetImplementedError, Target, TargetOption, hookimpl

__version__ = "1.2.3"


def _backend(options):
    raise NotYetImplementedError("the sample plugin generates no code")


@hookimpl
def cortex_register_targets(registry):
    registry.add(Target(
        name="sample",
        aliases=("sample-alias",),
        description="a sample third-party target",
        backend=_backend,
        options=(TargetOption("lanes", int, 4, "vector lanes", choices=(4, 8)),),
        enabled=lambda: Availability.yes("nothing to install"),
        runnable=lambda: Availability.no("the sample has no device", "none: it is a sample"),
    ))


@hookimpl
def cortex_environment_info():
    return {"sample-lib": "9.9"}
