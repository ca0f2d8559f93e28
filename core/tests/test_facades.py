"""The two facades are exactly what docs/reference/api.md lists, and every name resolves."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md"


def listed(facade: str) -> list[str]:
    """The names of the ``## `facade``` section's list items, in page order."""
    sections = re.split(r"^## ", API.read_text(encoding="utf-8"), flags=re.M)
    (section,) = [s for s in sections if s.startswith(f"`{facade}`\n")]
    return re.findall(r"^- `(\w+)`: \S", section, flags=re.M)


@pytest.mark.parametrize("facade", ["hango", "hango.middleware"])
def test_all_is_exactly_the_reference_list(facade: str) -> None:
    module = importlib.import_module(facade)
    names = listed(facade)
    assert len(names) == len(set(names)), f"{facade}: a name is listed twice in {API.name}"
    assert sorted(names) == sorted(module.__all__)
    for name in names:
        assert getattr(module, name) is not None


def test_every_exported_name_has_a_line_that_says_something() -> None:
    text = API.read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith("- `"):
            _, _, description = line.partition(": ")
            assert len(description.split()) >= 3, f"too short: {line}"


def test_version_is_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    import hango

    assert hango.__version__ == version("hango")


def test_the_shipped_plugins_import_only_names_the_facades_export() -> None:
    # import-linter keeps plugins out of hango's internals; this checks that every name they
    # take from a facade is in its __all__ (not merely reachable as a module attribute).
    import ast

    import hango
    import hango.middleware

    exported = {"hango": set(hango.__all__), "hango.middleware": set(hango.middleware.__all__)}
    plugins = Path(__file__).resolve().parents[2] / "plugins"
    for source in sorted(plugins.glob("*/src/**/*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in exported:
                for alias in node.names:
                    assert alias.name in exported[node.module], (
                        f"{source.relative_to(plugins)} imports {alias.name} from {node.module}, "
                        "which does not export it"
                    )
