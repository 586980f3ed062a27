"""Hook specifications of Cortex's plugin system (pluggy project name ``cortex``).

Pipeline position: outside the pipeline. :mod:`cortex.core.plugin.loader` loads the plugins (built-in
backends and the ``cortex.plugins`` entry-point group) and calls these hooks; what the plugins
register is what ``cortex.compile`` and ``cortex info`` see. Few hooks, rich base classes: a
backend's behaviour lives in :mod:`cortex.core.plugin.backend` and :mod:`cortex.core.plugin.targets`, not in
more hooks. Hooks take keyword arguments only (pluggy calls them that way).

Every hook spec here has a section in ``docs/plugins.md`` and a test; a meta-test
(``tests/core/test_hookspecs_documented.py``) fails when either is missing.

A plugin implements hooks with the :data:`hookimpl` marker::

    from cortex import hookimpl, Target

    @hookimpl
    def cortex_register_targets(registry):
        registry.add(Target(name="mytarget", description="...", backend=make_backend))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from cortex.core.plugin.targets import TargetRegistrar

PROJECT_NAME = "cortex"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def cortex_register_targets(registry: "TargetRegistrar") -> None:
    """Add the plugin's targets: call ``registry.add(Target(...))`` once per target.

    Called once per plugin when the registry is (re)built, lazily on first use. Targets the
    plugin added become visible only if the hook returns normally; if it raises, the plugin is
    reported as failed (a :class:`~cortex.core.errors.PluginWarning` and an entry in
    ``cortex info``) and the other plugins' targets stay available. A name or alias another
    plugin already registered is such a failure.

    Keep it cheap: decide *enabled*/*runnable* in the ``Target``'s check functions, not here,
    and import heavy libraries only inside the ``backend`` factory.
    """


@hookspec
def cortex_environment_info() -> dict[str, str] | None:
    """Describe the plugin's environment for ``cortex info``: ``{label: value}``.

    For example ``{"llvmlite": "0.44.0", "LLVM": "15.0.7"}``. Called only by ``cortex info``
    (so it may import the plugin's libraries, guarded: an exception is shown as the plugin's
    environment error, never a crash). Return ``None`` when there is nothing to report.
    """
