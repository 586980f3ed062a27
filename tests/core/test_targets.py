"""Targets, options, the registry, the backend contract and cortex.compile's front-door errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cortex
from cortex import (
    Availability,
    Capabilities,
    InvalidOptionError,
    NotYetImplementedError,
    PluginError,
    Target,
    TargetNotEnabledError,
    TargetOption,
    UnknownTargetError,
    hookimpl,
)
from cortex.core.api import PipelineNotAvailableError
from cortex.core.plugin.backend import Backend, Compiler, Renderer, Runtime
from cortex.core.plugin.distribution import pip_install
from cortex.core.plugin.targets import TargetRegistrar, TargetRegistry

pytestmark = pytest.mark.usefixtures("clean_plugins")


def _no_backend(options):
    raise AssertionError("not called")


def toy_target(**overrides) -> Target:
    fields = dict(
        name="toy", aliases=("toy-alias",), description="toy", backend=_no_backend,
        options=(
            TargetOption("threads", int, 0, minimum=0, allowed="an integer >= 0"),
            TargetOption("scale", float, 1.0, minimum=0.0, maximum=2.0),
            TargetOption("mode", str, "fast", choices=("fast", "exact")),
            TargetOption("check", bool, False),
            TargetOption("even", int, 2, check=lambda v: None if v % 2 == 0 else "odd"),
        ),
    )
    fields.update(overrides)
    return Target(**fields)


class TargetPlugin:
    def __init__(self, target: Target):
        self.target = target

    @hookimpl
    def cortex_register_targets(self, registry):
        registry.add(self.target)


# -- options --------------------------------------------------------------------------------------


def test_defaults_and_overrides_resolve():
    target = toy_target()
    assert target.resolve_options({}) == {"threads": 0, "scale": 1.0, "mode": "fast",
                                          "check": False, "even": 2}
    resolved = target.resolve_options({"threads": 4, "scale": 2, "mode": "exact", "check": True})
    assert resolved["threads"] == 4 and resolved["scale"] == 2.0 and type(resolved["scale"]) is float


@pytest.mark.parametrize(
    "option, value, allowed",
    [
        ("threads", -1, "an integer >= 0"),
        ("threads", True, "an integer >= 0"),  # a bool is not an int here
        ("threads", 2.0, "an integer >= 0"),
        ("scale", 3, "a number from 0.0 to 2.0"),
        ("scale", float("nan"), "a number from 0.0 to 2.0"),
        ("scale", "1", "a number from 0.0 to 2.0"),
        ("mode", "slow", "one of 'fast', 'exact'"),
        ("check", 1, "a boolean"),
        ("even", 3, "an integer (odd)"),
    ],
)
def test_bad_option_value_names_option_value_and_allowed(option, value, allowed):
    with pytest.raises(InvalidOptionError) as info:
        toy_target().resolve_options({option: value})
    err = info.value
    assert (err.target, err.option, err.allowed) == ("toy", option, allowed)
    assert f"{option}={value!r}" in str(err) and allowed in str(err)
    assert isinstance(err, ValueError)


def test_unknown_option_lists_the_accepted_ones():
    with pytest.raises(InvalidOptionError, match=r"thread=4.*no such option.*threads \(an integer"):
        toy_target().resolve_options({"thread": 4})
    with pytest.raises(InvalidOptionError, match="accepts no options"):
        toy_target(options=()).resolve_options({"x": 1})


def test_option_and_target_declarations_are_checked():
    with pytest.raises(TypeError, match="type must be one of"):
        TargetOption("x", list, [])
    with pytest.raises(ValueError, match="not a Python identifier"):
        TargetOption("not-ident", int, 0)
    with pytest.raises(ValueError, match="declares an option twice"):
        toy_target(options=(TargetOption("a", int, 0), TargetOption("a", int, 1)))
    with pytest.raises(ValueError, match="target name 'a b'"):
        toy_target(name="a b")


def test_availability_is_truthy_and_describes_itself():
    assert Availability.yes("found") and Availability.yes("found").describe() == "yes (found)"
    no = Availability.no("llvmlite is not installed", "pip install 'cortex-compiler[llvm]'")
    assert not no
    assert no.describe() == "no (llvmlite is not installed; fix: pip install 'cortex-compiler[llvm]')"


# -- registry -------------------------------------------------------------------------------------


def test_registry_resolves_names_and_aliases_and_rejects_clashes():
    registry = TargetRegistry()
    registrar = TargetRegistrar("toy-plugin")
    registrar.add(toy_target())
    registry.commit(registrar)
    assert registry.get("toy-alias").plugin == "toy-plugin"
    assert "toy" in registry and "toy-alias" in registry and len(registry) == 1
    assert registry.aliases == {"toy-alias": "toy"}

    clash = TargetRegistrar("other")
    clash.add(toy_target(name="fresh", aliases=()))
    clash.add(toy_target(name="toy-alias", aliases=()))
    with pytest.raises(PluginError, match="'toy-alias', which plugin 'toy-plugin' already"):
        registry.commit(clash)
    assert "fresh" not in registry  # nothing of a failing plugin is committed
    with pytest.raises(TypeError, match="must be a string"):
        registry.get(None)


# -- cortex.compile's front door ------------------------------------------------------------------


def test_unknown_target_lists_names_and_aliases():
    with pytest.raises(UnknownTargetError) as info:
        cortex.compile(object(), target="tpu")
    message = str(info.value)
    assert "unknown target 'tpu'" in message
    for name in ("llvm", "opencl", "cuda", "numpy", "cpu (= llvm)", "cortex info"):
        assert name in message
    assert isinstance(info.value, ValueError)


def test_disabled_target_gives_reason_and_fix(clean_plugins):
    clean_plugins.register_plugin(TargetPlugin(toy_target(
        enabled=lambda: Availability.no("the toy compiler is not installed",
                                        "pip install toy-compiler"))), name="toy-plugin")
    with pytest.raises(TargetNotEnabledError) as info:
        cortex.compile(object(), target="toy-alias", threads=-5)  # disabled is reported first
    assert str(info.value) == ("target 'toy' is not enabled: the toy compiler is not installed. "
                               "To fix: pip install toy-compiler")
    assert (info.value.reason, info.value.fix) == ("the toy compiler is not installed",
                                                   "pip install toy-compiler")


def test_builtin_llvm_target_without_llvmlite_says_how_to_install(monkeypatch):
    from cortex.plugins.cpu_llvm import target as llvm_target

    monkeypatch.setattr(llvm_target, "PACKAGE", "llvmlite_is_not_installed")
    fix = re.escape(pip_install("llvm"))  # names cortex-compiler, or this checkout
    with pytest.raises(TargetNotEnabledError, match=r"'llvm' is not enabled: llvmlite_is_not_"
                                                    rf"installed is not installed\. To fix: {fix}$"):
        cortex.compile(object(), target="cpu")


def test_bad_option_on_a_builtin_target():
    with pytest.raises(InvalidOptionError) as info:
        cortex.compile(object(), target="numpy", dtype="float16")
    assert str(info.value) == ("invalid option for target 'numpy': dtype='float16'; "
                               "allowed: one of 'float32', 'float64'")


def test_resolved_target_hands_off_to_the_pipeline(clean_plugins):
    clean_plugins.register_plugin(TargetPlugin(toy_target()), name="toy-plugin")
    target, options = cortex.resolve_target("toy", {"mode": "exact"})
    assert target.name == "toy" and options["mode"] == "exact"
    # the pipeline (cortex/core/pipeline.py) rejects a non-model before building a backend
    with pytest.raises(TypeError, match="cortex.compile takes a cortex model"):
        cortex.compile(object(), target="toy", mode="exact")
    assert issubclass(PipelineNotAvailableError, NotYetImplementedError)


def test_enabled_but_not_runnable_target_still_resolves(clean_plugins):
    clean_plugins.register_plugin(TargetPlugin(toy_target(
        runnable=lambda: Availability.no("no device", "buy one"))), name="toy-plugin")
    assert cortex.resolve_target("toy")[0].name == "toy"


@pytest.mark.parametrize("name", ["llvm", "opencl", "cuda", "numpy"])
def test_builtin_backends_provide_the_backend_contract(clean_plugins, name):
    target = clean_plugins.get_registry().get(name)
    if not target.enabled():
        pytest.skip(f"target {name!r} is not enabled here: {target.enabled().reason}")
    backend = target.create_backend(target.defaults())
    assert isinstance(backend, Backend) and isinstance(backend.capabilities, Capabilities)
    assert isinstance(backend.renderer, Renderer) and isinstance(backend.compiler, Compiler)
    assert isinstance(backend.runtime, Runtime)


# -- backend contract -----------------------------------------------------------------------------


class EchoRenderer(Renderer):
    def render(self, program):
        return f"program {program}"


class EchoCompiler(Compiler):
    identity = "echo 1"

    def compile(self, source, options):
        return (source, dict(options))


class HostRuntime(Runtime):
    def __init__(self):
        self.launched = []

    def allocate(self, shape, dtype):
        return np.empty(shape, dtype)

    def upload(self, array):
        return np.array(array, copy=True)

    def download(self, buffer, out):
        out[...] = buffer
        return out

    def launch(self, artifact, args, **launch_config):
        self.launched.append((artifact, args, launch_config))

    def synchronize(self):
        pass


def test_backend_contract_round_trip():
    backend = Backend(Capabilities(num_cores=2), EchoRenderer(), EchoCompiler(), HostRuntime())
    source = backend.renderer.render("p")
    artifact = backend.compiler.compile(source, {"threads": 2})
    assert artifact == ("program p", {"threads": 2})
    buffer = backend.runtime.upload(np.arange(3.0))
    backend.runtime.launch(artifact, (buffer,), grid=1)
    backend.runtime.synchronize()
    out = backend.runtime.download(buffer, np.zeros(3))
    np.testing.assert_array_equal(out, [0.0, 1.0, 2.0])
    with pytest.raises(TypeError):
        Runtime()  # abstract: a backend must provide every method


def test_cache_key_is_stable_and_changes_with_source_options_and_identity():
    compiler = EchoCompiler()
    key = compiler.cache_key("src", {"a": 1, "b": 2})
    assert key == compiler.cache_key("src", {"b": 2, "a": 1}) and len(key) == 64
    assert key == compiler.cache_key(b"src", {"a": 1, "b": 2})
    assert key != compiler.cache_key("src2", {"a": 1, "b": 2})
    assert key != compiler.cache_key("src", {"a": 1, "b": 3})
    other = EchoCompiler()
    other.identity = "echo 2"
    assert key != other.cache_key("src", {"a": 1, "b": 2})
