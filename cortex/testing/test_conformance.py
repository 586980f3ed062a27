"""The conformance suite: every selected target against the float64 reference.

Run it with ``python -m pytest --pyargs cortex.testing --cortex-target NAME`` (see
``cortex.testing.plugin`` and ``docs/conformance.md``). A project runs it from its own tests
with ``from cortex.testing.test_conformance import *``.
"""

from __future__ import annotations

import pytest

from cortex.testing import runner
from cortex.testing.build import ScheduleNotLegal
from cortex.testing.cases import Case
from cortex.testing.tolerance import ConformanceFailure

__all__ = ["test_compiles", "test_matches_reference", "test_schedules_agree",
           "test_output_contract", "test_nonfinite_propagates"]


def _run(fn, case: Case) -> None:
    """Run one case; a disagreement fails with the report alone (no traceback)."""
    skip = failure = None
    try:
        fn(case)
    except runner.NotRunnable as e:
        skip = str(e)
    except ScheduleNotLegal as e:
        skip = f"not applicable: {e}"
    except ConformanceFailure as e:
        failure = str(e)
    if skip is not None:
        pytest.skip(reason=skip)
    if failure is not None:
        pytest.fail(failure, pytrace=False)


def test_compiles(cortex_compile_case: Case) -> None:
    """Code generation and compilation succeed (runnable or compile-only targets)."""
    _run(runner.run_compile, cortex_compile_case)


def test_matches_reference(cortex_reference_case: Case) -> None:
    """Every state at every node agrees with the float64 reference within the tolerance."""
    _run(runner.run_reference, cortex_reference_case)


def test_schedules_agree(cortex_differential_case: Case) -> None:
    """Unscheduled and unfused programs agree with the default program on the same target."""
    _run(runner.run_differential, cortex_differential_case)


def test_output_contract(cortex_contract_case: Case) -> None:
    """Which states, which order, dtype, shapes, rows and ownership of the outputs."""
    _run(runner.run_contract, cortex_contract_case)


def test_nonfinite_propagates(cortex_nonfinite_case: Case) -> None:
    """NaN and +-inf in the input features propagate through each elementwise op as in the
    reference: nothing turns them into plausible numbers."""
    _run(runner.run_nonfinite, cortex_nonfinite_case)
