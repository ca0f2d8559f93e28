"""``ToolRegistry`` holds an agent's tools; a ``ToolView`` is what one run may see and call."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator

from hango.tool.base import Tool


class ToolRegistry:
    """An agent's tools in registration order; names are unique (``ValueError`` otherwise)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, tool: Tool) -> None:
        name = tool.spec.name
        if name in self._tools:
            raise ValueError(f"two tools are named {name!r}")
        self._tools[name] = tool

    def view(self, allowlist: Collection[str] | None = None) -> ToolView:
        """The tools a run may use: all of them when ``allowlist`` is None, else those named."""
        if allowlist is None:
            return ToolView(tuple(self._tools.values()))
        allowed = set(allowlist)
        return ToolView(tuple(t for n, t in self._tools.items() if n in allowed))

    def __len__(self) -> int:
        return len(self._tools)


class ToolView:
    """An ordered, read-only set of tools looked up by name."""

    __slots__ = ("_by_name", "tools")

    def __init__(self, tools: tuple[Tool, ...]) -> None:
        self.tools = tools
        self._by_name = {t.spec.name: t for t in tools}

    def get(self, name: str) -> Tool | None:
        return self._by_name.get(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)
