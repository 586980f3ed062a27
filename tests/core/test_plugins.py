"""The plugin system: built-in plugins, entry points, in-process plugins, failures, switches."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import cortex
from cortex import Availability, PluginError, PluginWarning, Target, UnknownTargetError, hookimpl
from cortex.core.plugin.loader import (
    BUILTIN,
    DEFAULT_PLUGINS,
    ENTRY_POINT,
    REGISTERED,
    PluginSelection,
    PluginSystem,
)

pytestmark = pytest.mark.usefixtures("clean_plugins")

BUILTIN_TARGETS = {"llvm", "opencl", "cuda", "numpy"}


def _no_backend(options):
    raise AssertionError("not called in these tests")


class ToyPlugin:
    """An in-process plugin registering one target."""

    def __init__(self, name: str = "toy", aliases: tuple[str, ...] = ("toy-alias",)):
        self.target_name, self.aliases = name, aliases

    @hookimpl
    def cortex_register_targets(self, registry):
        registry.add(Target(name=self.target_name, aliases=self.aliases, description="toy",
                            backend=_no_backend))


def sample_distribution(make_distribution, **entry_points):
    return make_distribution("cortex-sample", "1.2.3", "cortex_sample_plugin", "sample_plugin.py",
                             entry_points or {"sample": "cortex_sample_plugin"})


# -- built-in plugins and laziness ----------------------------------------------------------------


def test_default_plugins_is_one_tuple_of_importable_modules():
    assert isinstance(DEFAULT_PLUGINS, tuple)
    for module in DEFAULT_PLUGINS:
        assert importlib.import_module(module).__name__ == module


@pytest.mark.hook("cortex_register_targets")
def test_builtin_plugins_register_the_four_targets(clean_plugins):
    system = clean_plugins.get_plugin_system()
    registry = system.registry
    assert set(registry.names()) == BUILTIN_TARGETS
    assert registry.get("cpu") is registry.get("llvm")
    infos = {p.name: p for p in system.plugins()}
    assert set(infos) == {"cpu_llvm", "opencl", "cuda", "numpy_ref"}
    assert all(p.source == BUILTIN and p.version == cortex.__version__ for p in infos.values())
    assert "cortex_register_targets" in infos["cpu_llvm"].hooks
    assert system.failures == []


def test_import_cortex_loads_no_plugin_and_no_backend_library():
    code = (
        "import sys, json, cortex\n"
        "heavy = ['cortex.core.plugin.loader', 'cortex.plugins.cpu_llvm', 'cortex.plugins.opencl',"
        " 'cortex.plugins.cuda', 'cortex.plugins.numpy_ref', 'pluggy', 'llvmlite', 'pyopencl', 'pycuda']\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_plugins_load_on_first_use_not_before(clean_plugins):
    assert not clean_plugins.plugins_loaded()
    with pytest.raises(UnknownTargetError):
        cortex.compile(object(), target="no-such-target")
    assert clean_plugins.plugins_loaded()


# -- in-process plugins ---------------------------------------------------------------------------


@pytest.mark.hook("cortex_register_targets")
def test_in_process_plugin_appears_and_disappears(clean_plugins):
    registry = clean_plugins.get_registry()
    assert "toy" not in registry
    name = clean_plugins.register_plugin(ToyPlugin(), name="toy-plugin")
    assert name == "toy-plugin"
    target = clean_plugins.get_registry().get("toy-alias")
    assert (target.name, target.plugin) == ("toy", "toy-plugin")
    infos = {p.name: p for p in clean_plugins.get_plugin_system().plugins()}
    assert infos["toy-plugin"].source == REGISTERED
    assert cortex.resolve_target("toy")[0] is target

    clean_plugins.unregister_plugin("toy-plugin")
    with pytest.raises(UnknownTargetError):
        clean_plugins.get_registry().get("toy")
    assert "toy-plugin" not in {p.name for p in clean_plugins.get_plugin_system().plugins()}
    assert set(clean_plugins.get_registry().names()) == BUILTIN_TARGETS


def test_registering_a_name_twice_or_unregistering_an_unknown_one_raises(clean_plugins):
    clean_plugins.register_plugin(ToyPlugin(), name="toy-plugin")
    with pytest.raises(PluginError, match="already registered"):
        clean_plugins.register_plugin(ToyPlugin("toy2", ()), name="toy-plugin")
    with pytest.raises(PluginError, match="no cortex plugin named 'nobody'"):
        clean_plugins.unregister_plugin("nobody")


def test_in_process_plugin_with_an_unknown_hook_is_refused(clean_plugins):
    path = Path(__file__).parents[1] / "plugins" / "misnamed_hook_plugin.py"
    spec = importlib.util.spec_from_file_location("cortex_misnamed_in_process", path)
    misnamed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(misnamed)
    with pytest.warns(PluginWarning), pytest.raises(PluginError, match="cortex_register_target\\b"):
        clean_plugins.register_plugin(misnamed, name="misnamed")
    assert not clean_plugins.get_plugin_system().manager.has_plugin("misnamed")


# -- entry points ---------------------------------------------------------------------------------


@pytest.mark.hook("cortex_register_targets")
@pytest.mark.hook("cortex_environment_info")
def test_entry_point_plugin_is_discovered(clean_plugins, make_distribution):
    sample_distribution(make_distribution)
    system = clean_plugins.get_plugin_system()
    target = system.registry.get("sample-alias")
    assert (target.name, target.plugin) == ("sample", "sample")
    info = {p.name: p for p in system.plugins()}["sample"]
    assert (info.source, info.version, info.module) == (ENTRY_POINT, "1.2.3", "cortex_sample_plugin")
    assert system.environment_info()["sample"] == {"sample-lib": "9.9"}
    # its typed option is validated like a built-in one
    assert cortex.resolve_target("sample", {"lanes": 8})[1] == {"lanes": 8}
    assert set(system.registry.names()) == BUILTIN_TARGETS | {"sample"}


def test_plugin_that_raises_on_import_is_reported_and_others_work(clean_plugins, make_distribution):
    sample_distribution(make_distribution)
    make_distribution("cortex-broken", "0.1", "cortex_broken_plugin", "broken_plugin.py",
                      {"broken": "cortex_broken_plugin"})
    with pytest.warns(PluginWarning, match="broken.*failed at import.*dependency of this plugin"):
        system = clean_plugins.get_plugin_system()
    (failure,) = system.failures
    assert (failure.name, failure.source, failure.stage) == ("broken", ENTRY_POINT, "import")
    assert "ImportError" in failure.error and "Traceback" in failure.detail
    assert set(system.registry.names()) == BUILTIN_TARGETS | {"sample"}


def test_entry_point_with_an_unknown_hook_is_reported(clean_plugins, make_distribution):
    make_distribution("cortex-misnamed", "0.1", "cortex_misnamed_plugin",
                      "misnamed_hook_plugin.py", {"misnamed": "cortex_misnamed_plugin"})
    with pytest.warns(PluginWarning, match="unknown hook"):
        system = clean_plugins.get_plugin_system()
    assert [(f.name, f.stage) for f in system.failures] == [("misnamed", "hooks")]
    assert set(system.registry.names()) == BUILTIN_TARGETS


# -- registration failures ------------------------------------------------------------------------


class HalfwayPlugin:
    """Adds one target, then raises: none of its targets may be left behind."""

    @hookimpl
    def cortex_register_targets(self, registry):
        registry.add(Target(name="halfway", description="", backend=_no_backend))
        raise RuntimeError("registration went wrong")


@pytest.mark.hook("cortex_register_targets")
def test_plugin_that_raises_during_registration_is_reported_atomically(clean_plugins):
    clean_plugins.register_plugin(HalfwayPlugin(), name="halfway-plugin")
    with pytest.warns(PluginWarning, match="halfway-plugin.*failed at register.*went wrong"):
        registry = clean_plugins.get_registry()
    assert "halfway" not in registry
    assert set(registry.names()) == BUILTIN_TARGETS
    failures = clean_plugins.get_plugin_system().failures
    assert [(f.name, f.stage) for f in failures] == [("halfway-plugin", "register")]


def test_plugin_taking_a_builtin_name_or_alias_fails_and_builtin_keeps_it(clean_plugins):
    clean_plugins.register_plugin(ToyPlugin("mine", aliases=("cpu",)), name="squatter")
    with pytest.warns(PluginWarning, match="'cpu'.*already registered"):
        registry = clean_plugins.get_registry()
    assert registry.get("cpu").plugin == "cpu_llvm"
    assert "mine" not in registry


def test_registry_add_rejects_what_is_not_a_target(clean_plugins):
    class Wrong:
        @hookimpl
        def cortex_register_targets(self, registry):
            registry.add({"name": "dict-target"})

    clean_plugins.register_plugin(Wrong(), name="wrong")
    with pytest.warns(PluginWarning, match="takes a cortex.Target, not dict"):
        clean_plugins.get_registry()


@pytest.mark.hook("cortex_environment_info")
def test_environment_info_reports_builtin_plugins_and_survives_a_raising_plugin(clean_plugins):
    class Raising:
        @hookimpl
        def cortex_environment_info(self):
            raise OSError("cannot read the device list")

    clean_plugins.register_plugin(Raising(), name="raising")
    info = clean_plugins.get_plugin_system().environment_info()
    assert set(info["cpu_llvm"]) >= {"llvmlite"}
    assert set(info["cuda"]) >= {"nvcc", "CUDA driver", "pycuda"}
    assert info["raising"] == {"error": "OSError: cannot read the device list"}


# -- environment switches -------------------------------------------------------------------------


def test_selection_reads_the_switches():
    sel = PluginSelection.from_environ({"CORTEX_PLUGINS": " a, b ,", "CORTEX_DISABLE_PLUGINS": "b",
                                        "CORTEX_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert sel.only == {"a", "b"} and sel.disabled == {"b"} and sel.autoload is False
    assert sel.wants("a") and not sel.wants("b") and not sel.wants("c")
    assert PluginSelection.from_environ({}) == PluginSelection()


def test_disable_switch(clean_plugins, monkeypatch):
    monkeypatch.setenv("CORTEX_DISABLE_PLUGINS", "opencl,cortex.plugins.cuda")
    system = clean_plugins.get_plugin_system()
    assert set(system.registry.names()) == {"llvm", "numpy"}
    assert dict(system.skipped) == {"opencl": "disabled by CORTEX_DISABLE_PLUGINS",
                                    "cuda": "disabled by CORTEX_DISABLE_PLUGINS"}


def test_only_switch(clean_plugins, monkeypatch, make_distribution):
    sample_distribution(make_distribution)
    monkeypatch.setenv("CORTEX_PLUGINS", "numpy_ref,sample")
    assert set(clean_plugins.get_registry().names()) == {"numpy", "sample"}


def test_only_switch_naming_an_unknown_plugin_is_reported(clean_plugins, monkeypatch):
    monkeypatch.setenv("CORTEX_PLUGINS", "numpy_ref,nosuch")
    with pytest.warns(PluginWarning, match="'nosuch'.*neither a built-in plugin"):
        system = clean_plugins.get_plugin_system()
    assert set(system.registry.names()) == {"numpy"}
    assert [(f.name, f.stage) for f in system.failures] == [("nosuch", "select")]


def test_autoload_switch_skips_entry_points_unless_named(clean_plugins, monkeypatch,
                                                          make_distribution):
    sample_distribution(make_distribution)
    monkeypatch.setenv("CORTEX_DISABLE_PLUGIN_AUTOLOAD", "1")
    system = clean_plugins.get_plugin_system()
    assert set(system.registry.names()) == BUILTIN_TARGETS
    assert dict(system.skipped)["sample"].startswith("entry points not loaded")

    monkeypatch.setenv("CORTEX_PLUGINS", "sample,cpu_llvm")
    clean_plugins.reset_plugins()
    assert set(clean_plugins.get_registry().names()) == {"sample", "llvm"}


def test_switches_are_read_again_after_reset(clean_plugins, monkeypatch):
    assert "opencl" in clean_plugins.get_registry()
    monkeypatch.setenv("CORTEX_DISABLE_PLUGINS", "opencl")
    assert "opencl" in clean_plugins.get_registry()  # loaded once; the switch waits for a reset
    clean_plugins.reset_plugins()
    assert "opencl" not in clean_plugins.get_registry()


def test_plugin_system_with_explicit_builtins_and_no_entry_points():
    system = PluginSystem(PluginSelection(), builtins=("cortex.plugins.numpy_ref",),
                          load_entry_points=False)
    assert system.registry.names() == ("numpy",)


def test_missing_builtin_module_is_reported_not_raised():
    with pytest.warns(PluginWarning, match="no_such_backend.*failed at import"):
        system = PluginSystem(PluginSelection(),
                              builtins=("cortex.plugins.no_such_backend", "cortex.plugins.numpy_ref"),
                              load_entry_points=False)
    assert system.registry.names() == ("numpy",)
    assert system.failures[0].source == BUILTIN


def test_target_registered_with_an_unavailable_state_stays_listed(clean_plugins):
    class Unavailable:
        @hookimpl
        def cortex_register_targets(self, registry):
            registry.add(Target(name="offline", description="", backend=_no_backend,
                                enabled=lambda: Availability.no("tool missing", "install it")))

    clean_plugins.register_plugin(Unavailable(), name="unavailable")
    assert not clean_plugins.get_registry().get("offline").enabled()
