"""Built-in backend plugins. Each subpackage is an ordinary Cortex plugin (see
``cortex.core.plugin.loader.DEFAULT_PLUGINS``): its ``__init__`` implements the hooks of
``cortex.core.plugin.hookspecs`` and its ``target`` module describes the target, its options and how to
tell whether it is enabled and runnable here."""
