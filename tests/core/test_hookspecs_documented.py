"""Meta-test: every hook spec is typed, has a docstring, a docs/plugins.md entry and a test.

A hook is *documented* when docs/plugins.md has a ``### `name``` heading followed by text, and
*tested* when some test function under tests/ carries ``@pytest.mark.hook("name")``. Adding a
hook spec without both makes this test fail.
"""

from __future__ import annotations

import ast
import inspect
import re
import types
from pathlib import Path

from cortex.core.plugin import hookspecs

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "plugins.md"
TESTS = ROOT / "tests"


def hook_specs(module: types.ModuleType) -> dict[str, object]:
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return {name: fn for name, fn in vars(module).items()
            if callable(fn) and hasattr(fn, marker)}


def hooks_with_docs(markdown: str) -> set[str]:
    """Hook names with a ``### `name``` heading followed by at least one line of text."""
    found = set()
    for match in re.finditer(r"^### `(\w+)`\n+(.+)$", markdown, flags=re.MULTILINE):
        if match.group(2).strip() and not match.group(2).startswith("#"):
            found.add(match.group(1))
    return found


def hooks_with_tests(tests_dir: Path) -> set[str]:
    """Hook names named by ``@pytest.mark.hook("name")`` on a ``test_*`` function."""
    found = set()
    for path in tests_dir.rglob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            for deco in node.decorator_list:
                if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                        and deco.func.attr == "hook" and ast.unparse(deco.func) == "pytest.mark.hook"
                        and deco.args and isinstance(deco.args[0], ast.Constant)):
                    found.add(deco.args[0].value)
    return found


def problems(specs: dict[str, object], markdown: str, tests_dir: Path) -> list[str]:
    docs, tests = hooks_with_docs(markdown), hooks_with_tests(tests_dir)
    found = []
    for name, fn in sorted(specs.items()):
        if not (inspect.getdoc(fn) or "").strip():
            found.append(f"{name}: the spec has no docstring")
        signature = inspect.signature(fn)
        if signature.return_annotation is inspect.Signature.empty or any(
                p.annotation is inspect.Parameter.empty for p in signature.parameters.values()):
            found.append(f"{name}: the spec is not fully type-annotated")
        if name not in docs:
            found.append(f"{name}: no '### `{name}`' section in docs/plugins.md")
        if name not in tests:
            found.append(f"{name}: no test marked @pytest.mark.hook({name!r})")
    return found


def test_every_hook_spec_is_documented_typed_and_tested():
    specs = hook_specs(hookspecs)
    assert specs, "no hook spec found in cortex.core.plugin.hookspecs"
    assert problems(specs, DOCS.read_text(encoding="utf-8"), TESTS) == []


def test_the_meta_test_notices_a_missing_entry(tmp_path):
    fake = types.ModuleType("fake_hookspecs")

    @hookspecs.hookspec
    def cortex_new_hook(x):
        pass

    fake.cortex_new_hook = cortex_new_hook
    (tmp_path / "test_fake.py").write_text(
        "import pytest\n@pytest.mark.hook('cortex_other')\ndef test_x():\n    pass\n")
    found = problems(hook_specs(fake), "### `cortex_new_hook`\n\n### `x`\n", tmp_path)
    assert found == [
        "cortex_new_hook: the spec has no docstring",
        "cortex_new_hook: the spec is not fully type-annotated",
        "cortex_new_hook: no '### `cortex_new_hook`' section in docs/plugins.md",
        "cortex_new_hook: no test marked @pytest.mark.hook('cortex_new_hook')",
    ]


def test_hook_names_are_prefixed_and_known_to_the_plugin_system():
    from cortex.core.plugin.loader import hook_names

    assert set(hook_names()) == set(hook_specs(hookspecs))
    assert all(name.startswith("cortex_") for name in hook_names())
