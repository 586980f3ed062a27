"""A Cortex plugin whose import fails, as when one of its dependencies is missing (for tests)."""

raise ImportError("sample failure: a dependency of this plugin is missing")
