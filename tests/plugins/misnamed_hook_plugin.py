"""A Cortex plugin that implements a hook Cortex does not define (a typo), for tests."""

from cortex import hookimpl


@hookimpl
def cortex_register_target(registry):  # missing the final "s": not a Cortex hook
    raise AssertionError("never called")
