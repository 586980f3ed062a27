"""Plugin loading: built-in backends, third-party entry points, environment switches.

Pipeline position: outside the pipeline, in front of it. The first time something needs the
target registry (``cortex.compile``, ``cortex info``), :func:`get_plugin_system` loads the
plugins — never at ``import cortex``. Sources, in order:

1. the built-in plugins, the modules named in :data:`DEFAULT_PLUGINS` (ordinary plugins, no
   special path in the code);
2. third-party plugins, from the entry-point group ``cortex.plugins`` (:data:`ENTRY_POINT_GROUP`);
3. plugins registered in-process with :func:`register_plugin` (tests, notebooks).

Environment switches, read when the plugins are (re)loaded (see :func:`reset_plugins`), in the
spirit of pytest's ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``, tox's and llm's ``LLM_LOAD_PLUGINS``:

* ``CORTEX_PLUGINS=a,b`` — load only these plugins (built-in short names such as ``cpu_llvm``,
  module names, or entry-point names). Empty or unset: no restriction.
* ``CORTEX_DISABLE_PLUGINS=a,b`` — never load these.
* ``CORTEX_DISABLE_PLUGIN_AUTOLOAD=1`` — do not load entry points, except those named in
  ``CORTEX_PLUGINS``.

A plugin that raises while being imported or while registering its targets, or that implements
a hook Cortex does not define, is reported — a :class:`~cortex.core.errors.PluginWarning` and an
entry in ``cortex info`` — and the other plugins keep working.
"""

from __future__ import annotations

import importlib
import os
import threading
import traceback
import warnings
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Iterable, Mapping

import pluggy

from cortex.core.errors import PluginError, PluginWarning
from cortex.core.plugin import hookspecs
from cortex.core.plugin.targets import TargetRegistrar, TargetRegistry

#: The built-in backends, as module names; each is an ordinary plugin.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "cortex.plugins.cpu_llvm",
    "cortex.plugins.opencl",
    "cortex.plugins.cuda",
    "cortex.plugins.numpy_ref",
)

ENTRY_POINT_GROUP = "cortex.plugins"
ENV_ONLY = "CORTEX_PLUGINS"
ENV_DISABLE = "CORTEX_DISABLE_PLUGINS"
ENV_NO_AUTOLOAD = "CORTEX_DISABLE_PLUGIN_AUTOLOAD"
ENV_SWITCHES = (ENV_ONLY, ENV_DISABLE, ENV_NO_AUTOLOAD)

BUILTIN, ENTRY_POINT, REGISTERED = "built-in", "entry point", "registered in-process"


def builtin_name(module: str) -> str:
    """The short name of a built-in plugin: ``cortex.plugins.cpu_llvm`` -> ``cpu_llvm``."""
    return module.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin, as ``cortex info`` shows it."""

    name: str
    source: str  # BUILTIN, ENTRY_POINT or REGISTERED
    module: str
    version: str | None
    hooks: tuple[str, ...]


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be used, and why."""

    name: str
    source: str
    stage: str  # "import", "register", "hooks" or "select"
    error: str  # one line
    detail: str = ""  # traceback, when there is one

    def describe(self) -> str:
        return f"{self.name} ({self.source}) failed at {self.stage}: {self.error}"


@dataclass(frozen=True)
class PluginSelection:
    """Which plugins to load, from the environment switches."""

    only: frozenset[str] | None = None
    disabled: frozenset[str] = frozenset()
    autoload: bool = True

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "PluginSelection":
        env = os.environ if environ is None else environ
        only = _split(env.get(ENV_ONLY, ""))
        return cls(
            only=frozenset(only) if only else None,
            disabled=frozenset(_split(env.get(ENV_DISABLE, ""))),
            autoload=env.get(ENV_NO_AUTOLOAD, "").strip().lower() not in {"1", "true", "yes"},
        )

    def wants(self, *names: str) -> bool:
        """Whether a plugin known by any of ``names`` may be loaded."""
        if any(n in self.disabled for n in names):
            return False
        return self.only is None or any(n in self.only for n in names)

    def why_not(self, *names: str) -> str:
        if any(n in self.disabled for n in names):
            return f"disabled by {ENV_DISABLE}"
        return f"not named in {ENV_ONLY}"


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class PluginSystem:
    """The pluggy plugin manager plus what Cortex knows about each plugin.

    Usually obtained through :func:`get_plugin_system`; tests may build their own with explicit
    ``builtins`` and ``selection``.
    """

    def __init__(
        self,
        selection: PluginSelection | None = None,
        builtins: Iterable[str] = DEFAULT_PLUGINS,
        load_entry_points: bool = True,
    ) -> None:
        self.selection = selection if selection is not None else PluginSelection.from_environ()
        self.manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.manager.add_hookspecs(hookspecs)
        self._info: dict[str, tuple[str, str, str | None]] = {}  # name -> source, module, version
        self.load_failures: list[PluginFailure] = []
        self.register_failures: list[PluginFailure] = []
        self.skipped: list[tuple[str, str]] = []  # (name, why), from the environment switches
        self._registry: TargetRegistry | None = None
        self._warned: set[tuple[str, str, str]] = set()
        self._lock = threading.RLock()
        seen = self._load_builtins(tuple(builtins))
        if load_entry_points:
            seen |= self._load_entry_points()
        self._check_selection(seen)

    # -- loading -------------------------------------------------------------------------------

    def _load_builtins(self, modules: tuple[str, ...]) -> set[str]:
        seen = set()
        for module in modules:
            name = builtin_name(module)
            seen |= {name, module}
            if not self.selection.wants(name, module):
                self.skipped.append((name, self.selection.why_not(name, module)))
                continue
            try:
                plugin = importlib.import_module(module)
            except Exception as exc:  # a broken plugin must not break the others
                self._fail(PluginFailure(name, BUILTIN, "import", _one_line(exc),
                                         traceback.format_exc()))
                continue
            from cortex import __version__

            self._add(plugin, name, BUILTIN, module, __version__)
        return seen

    def _load_entry_points(self) -> set[str]:
        seen: set[str] = set()
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in seen:  # the same distribution found twice on sys.path
                continue
            seen.add(ep.name)
            named = self.selection.only is not None and ep.name in self.selection.only
            if not self.selection.autoload and not named:
                self.skipped.append((ep.name, f"entry points not loaded ({ENV_NO_AUTOLOAD}=1)"))
                continue
            if not self.selection.wants(ep.name):
                self.skipped.append((ep.name, self.selection.why_not(ep.name)))
                continue
            version = ep.dist.version if ep.dist is not None else None
            try:
                plugin = ep.load()
            except Exception as exc:
                self._fail(PluginFailure(ep.name, ENTRY_POINT, "import", _one_line(exc),
                                         traceback.format_exc()))
                continue
            self._add(plugin, ep.name, ENTRY_POINT, ep.value, version)
        return seen

    def _check_selection(self, seen: set[str]) -> None:
        for name in sorted((self.selection.only or frozenset()) - seen):
            known = ", ".join(sorted(n for n in seen if "." not in n)) or "none"
            self._fail(PluginFailure(
                name, ENV_ONLY, "select",
                f"{ENV_ONLY} names {name!r}, which is neither a built-in plugin nor an "
                f"installed entry point (known: {known})"))

    def _add(self, plugin: Any, name: str, source: str, module: str, version: str | None) -> None:
        try:
            self.manager.register(plugin, name=name)
        except Exception as exc:  # pluggy.PluginValidationError, or a name already taken
            self._fail(PluginFailure(name, source, "hooks", _one_line(exc), traceback.format_exc()))
            return
        unknown = [hc.name for hc in self.manager.get_hookcallers(plugin) or [] if hc.spec is None]
        if unknown:
            self.manager.unregister(plugin)
            known = ", ".join(hook_names())
            self._fail(PluginFailure(
                name, source, "hooks",
                f"implements unknown hook(s) {', '.join(unknown)}; Cortex's hooks are: {known}"))
            return
        self._info[name] = (source, module, version)
        self._registry = None

    def _fail(self, failure: PluginFailure) -> None:
        if failure.stage == "register":
            self.register_failures.append(failure)
        else:
            self.load_failures.append(failure)
        key = (failure.name, failure.stage, failure.error)
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(
                PluginWarning(
                    f"cortex plugin {failure.describe()}. Its targets are unavailable; the other "
                    "plugins keep working. Run `cortex info` for details."
                ),
                stacklevel=4,
            )

    # -- in-process registration ---------------------------------------------------------------

    def register(self, plugin: Any, name: str | None = None) -> str:
        """Register a plugin object (module, class instance, ...); returns its name.

        Raises :class:`PluginError` when it cannot be registered (name taken, unknown hook,
        hook with wrong arguments) — unlike loading, a direct call is told directly.
        """
        with self._lock:
            name = name or getattr(plugin, "__name__", None) or self.manager.get_canonical_name(plugin)
            if self.manager.has_plugin(name):
                raise PluginError(f"a cortex plugin named {name!r} is already registered")
            before = len(self.load_failures)
            self._add(plugin, name, REGISTERED, getattr(plugin, "__module__", "") or name,
                      getattr(plugin, "__version__", None))
            if len(self.load_failures) > before:
                raise PluginError(self.load_failures.pop().describe())
            return name

    def unregister(self, name: str) -> None:
        """Remove a plugin (and therefore its targets) by name."""
        with self._lock:
            if not self.manager.has_plugin(name):
                raise PluginError(f"no cortex plugin named {name!r} is registered")
            self.manager.unregister(name=name)
            self._info.pop(name, None)
            self._registry = None

    # -- what the plugins provide --------------------------------------------------------------

    @property
    def registry(self) -> TargetRegistry:
        """The targets of every loaded plugin (rebuilt after a plugin is added or removed)."""
        with self._lock:
            if self._registry is None:
                self._registry = self._build_registry()
            return self._registry

    def _build_registry(self) -> TargetRegistry:
        registry = TargetRegistry()
        self.register_failures = []
        # Each plugin's hook is called on its own, so one failing plugin costs only its targets.
        for impl in self.manager.hook.cortex_register_targets.get_hookimpls():
            source = self._info.get(impl.plugin_name, (REGISTERED,))[0]
            registrar = TargetRegistrar(impl.plugin_name)
            try:
                impl.function(**_kwargs(impl, registry=registrar))
                registry.commit(registrar)
            except Exception as exc:
                self._fail(PluginFailure(impl.plugin_name, source, "register", _one_line(exc),
                                         traceback.format_exc()))
        return registry

    def environment_info(self) -> dict[str, dict[str, str]]:
        """``{plugin name: {label: value}}`` from ``cortex_environment_info`` (errors included)."""
        result: dict[str, dict[str, str]] = {}
        for impl in self.manager.hook.cortex_environment_info.get_hookimpls():
            try:
                info = impl.function(**_kwargs(impl))
            except Exception as exc:
                result[impl.plugin_name] = {"error": _one_line(exc)}
                continue
            if info:
                result[impl.plugin_name] = {str(k): str(v) for k, v in dict(info).items()}
        return result

    @property
    def failures(self) -> list[PluginFailure]:
        self.registry  # registration failures are known only once the registry is built
        return self.load_failures + self.register_failures

    def plugins(self) -> list[PluginInfo]:
        result = []
        for name, plugin in self.manager.list_name_plugin():
            source, module, version = self._info.get(name, (REGISTERED, name, None))
            hooks = tuple(sorted(hc.name for hc in self.manager.get_hookcallers(plugin) or []))
            result.append(PluginInfo(name, source, module, version, hooks))
        return result



def hook_names() -> tuple[str, ...]:
    """The names of Cortex's hook specs."""
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return tuple(sorted(n for n, f in vars(hookspecs).items() if hasattr(f, marker)))


def _kwargs(impl: pluggy.HookImpl, **available: Any) -> dict[str, Any]:
    return {name: available[name] for name in impl.argnames}


_system: PluginSystem | None = None
_system_lock = threading.Lock()


def get_plugin_system() -> PluginSystem:
    """The process-wide plugin system, loaded on first call (reads the environment switches)."""
    global _system
    with _system_lock:
        if _system is None:
            _system = PluginSystem()
        return _system


def get_registry() -> TargetRegistry:
    """The process-wide target registry (loads the plugins on first use)."""
    return get_plugin_system().registry


def reset_plugins() -> None:
    """Forget the loaded plugins; the next use reloads them and re-reads the switches.

    Plugins added with :func:`register_plugin` are forgotten too.
    """
    global _system
    with _system_lock:
        _system = None


def register_plugin(plugin: Any, name: str | None = None) -> str:
    """Register a plugin in-process (its targets appear at once); returns its name."""
    return get_plugin_system().register(plugin, name)


def unregister_plugin(name: str) -> None:
    """Remove an in-process (or any) plugin by name; its targets disappear at once."""
    get_plugin_system().unregister(name)


def plugins_loaded() -> bool:
    """Whether the process-wide plugins have been loaded (``import cortex`` must not load them)."""
    return _system is not None
