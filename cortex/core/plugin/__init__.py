"""The plugin system: how backends register targets and what they must provide.

Pipeline position: in front of and beside the pipeline.
:mod:`~cortex.core.plugin.loader` loads the built-in and third-party plugins (pluggy);
:mod:`~cortex.core.plugin.hookspecs` declares the hooks; :mod:`~cortex.core.plugin.targets`
holds targets, their options and the registry; :mod:`~cortex.core.plugin.backend` is the
contract a backend implements (renderer, compiler, runtime);
:mod:`~cortex.core.plugin.capabilities` is what the core may ask of a target instead of its
name; :mod:`~cortex.core.plugin.hostinfo` probes what this host offers.
"""
