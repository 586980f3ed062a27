"""PoCL's worker threads pinned or not (``cortex.plugins.opencl.workers``, the ``pin_workers``
option): the process-wide ``POCL_AFFINITY`` is set only where the user has not set it and PoCL
has not started; a compile reports whether its request holds, and why not; the ``tree_groups``
knob's default follows it. No device needed (the last test compiles where one exists).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from cortex.core.lowering.schedule import ScheduleSpace
from cortex.core.plugin.capabilities import Capabilities
from cortex.plugins.opencl import target, workers


@pytest.fixture
def fresh(monkeypatch):
    """A process in which PoCL has not started and cortex has set nothing."""
    monkeypatch.setattr(workers, "_PROCESS", workers._Process())
    monkeypatch.setattr(workers, "pocl_loaded", lambda: False)
    monkeypatch.delenv(workers.ENV, raising=False)
    return monkeypatch


def test_the_default_is_set_where_the_user_set_nothing(fresh):
    workers.apply_default(True)
    assert workers.os.environ[workers.ENV] == "1"
    workers.note_probe()
    got = workers.pinning(True, pthread_device=True)
    assert got.in_effect and got.as_requested and "cortex's default" in got.reason


def test_the_users_setting_is_never_overridden(fresh):
    fresh.setenv(workers.ENV, "0")
    workers.apply_default(True)
    workers.note_probe(pin=True)  # a compile asking for pinned workers
    assert workers.os.environ[workers.ENV] == "0"
    got = workers.pinning(True, pthread_device=True)
    assert not got.in_effect and not got.as_requested
    assert "the user's" in got.reason and "pin_workers=True is not in effect" in got.reason


def test_a_first_compile_decides_cortexs_own_value(fresh):
    workers.apply_default(True)
    workers.note_probe(pin=False)  # the first probe comes from a compile with pin_workers=False
    assert workers.os.environ[workers.ENV] == "0"
    assert workers.pinning(False, pthread_device=True).as_requested


def test_a_later_request_cannot_change_a_started_pocl(fresh):
    workers.apply_default(True)
    workers.note_probe()  # the runnable check starts PoCL with cortex's default
    workers.note_probe(pin=False)
    assert workers.os.environ[workers.ENV] == "1"
    got = workers.pinning(False, pthread_device=True)
    assert got.in_effect and not got.as_requested
    assert "pin_workers=False is not in effect" in got.reason and "POCL_AFFINITY=0" in got.reason


def test_pocl_loaded_before_cortex_looked_is_said(monkeypatch):
    monkeypatch.setattr(workers, "_PROCESS", workers._Process())
    monkeypatch.setattr(workers, "pocl_loaded", lambda: True)
    monkeypatch.delenv(workers.ENV, raising=False)
    workers.apply_default(True)
    assert workers.ENV not in workers.os.environ  # too late to set: nothing set
    got = workers.pinning(True, pthread_device=True)
    assert not got.in_effect and "loaded before cortex first looked" in got.reason


def test_other_devices_have_nothing_to_pin(fresh):
    got = workers.pinning(True, pthread_device=False)
    assert not got.in_effect and "not PoCL's CPU device" in got.reason


def test_options_are_typed():
    t = target.make_target()
    assert t.resolve_options({})["pin_workers"] is target.PIN_WORKERS
    assert t.resolve_options({"pin_workers": False})["pin_workers"] is False
    assert t.resolve_options({})["tree_groups"] == -1
    for bad in ({"pin_workers": "yes"}, {"pin_workers": 1}, {"tree_groups": -2}, {"tree_groups": 1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            t.resolve_options(bad)


def test_tree_groups_default_is_a_rule_over_capabilities():
    cpu = Capabilities(num_cores=2, single_group_form=True, independent_groups=0)

    def default(caps):
        return ScheduleSpace(caps, "float32").default().tree_groups

    assert default(cpu) == 1
    assert default(replace(cpu, pinned_workers=True)) == 2
    assert default(replace(cpu, pinned_workers=True, num_cores=4)) == 4
    assert default(replace(cpu, pinned_workers=True, independent_groups=1)) == 1  # the setting wins
    assert default(replace(cpu, independent_groups=4)) == 4
    assert default(Capabilities(num_cores=2, pinned_workers=True)) == 1  # no one-group form
