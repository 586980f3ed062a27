"""The shipped conformance suite (``cortex.testing.test_conformance``) on the selected targets
(``--cortex-target``/``CORTEX_TEST_TARGETS``; ``numpy`` when none is given)."""

from cortex.testing.test_conformance import *  # noqa: F401,F403
