"""A tool box for tests: tools that count their starts and completions, can be held at their
start until the test lets them go (an anyio Event), and can end the process's run as a
``kill -9`` would (``Killed``).

::

    box = ToolBox()

    @box.tool
    def look(path: str) -> str:
        \"\"\"Read something.\"\"\"
        return f"looked at {path}"

    # in a test: box.executed == ["look a.txt"] once the run called look(path="a.txt")

Every box is emptied before each test by the ``hango.testing`` pytest plugin, so a box made at
module level serves a whole test file.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any, overload

import anyio
from attrs import define, field

from hango.provider.messages import ToolSpec
from hango.tool.base import ToolContext, ToolResult
from hango.tool.function import FunctionTool, tool

_BOXES: weakref.WeakSet[ToolBox] = weakref.WeakSet()


class Killed(BaseException):
    """Ends the process's run where it is raised, as a ``kill -9`` would: no layer catches a
    ``BaseException``, so nothing after it is saved and the run stays as its last checkpoint
    left it."""


@define
class Hold:
    """A hold on one tool: its calls wait at their start until ``release()``; ``entered`` is
    set when the first held call is waiting."""

    entered: anyio.Event = field(factory=anyio.Event)
    released: anyio.Event = field(factory=anyio.Event)

    def release(self) -> None:
        self.released.set()


class ToolBox:
    """Makes counted tools and remembers what they did.

    Each call is told by its label, ``"name v1 v2"`` (the tool's name, then the argument
    values in the order of its parameters). ``started`` gets the label when the call reaches
    the tool; ``executed`` when the tool's function begins (after a hold is released; never
    for a killed call); ``completed`` when the function returns (not when it raises).
    ``hold(name)`` makes the next calls of ``name`` wait; ``kill(name)`` makes its next call
    raise ``Killed``. ``clear()`` empties it all (the lists are emptied in place, so aliases
    such as ``executed = box.executed`` stay valid)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.executed: list[str] = []
        self.completed: list[str] = []
        self._holds: dict[str, Hold] = {}
        self._kills: dict[str, int] = {}
        _BOXES.add(self)

    def clear(self) -> None:
        self.started.clear()
        self.executed.clear()
        self.completed.clear()
        self._holds.clear()
        self._kills.clear()

    def count(self, name: str) -> tuple[int, int]:
        """``(started, completed)`` calls of tool ``name``."""

        def of(labels: list[str]) -> int:
            return sum(1 for label in labels if label.split(" ", 1)[0] == name)

        return of(self.started), of(self.completed)

    def hold(self, name: str) -> Hold:
        """Hold the calls of tool ``name`` at their start until the returned hold is released.
        Create it inside the test's event loop (an anyio Event belongs to one)."""
        self._holds[name] = Hold()
        return self._holds[name]

    def kill(self, name: str, times: int = 1) -> None:
        """The next ``times`` calls of tool ``name`` raise ``Killed`` after they start."""
        self._kills[name] = times

    @overload
    def tool(self, func: Callable[..., Any], /) -> CountedTool: ...
    @overload
    def tool(
        self, /, *, name: str | None = None, idempotent: bool = True
    ) -> Callable[[Callable[..., Any]], CountedTool]: ...

    def tool(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        idempotent: bool = True,
    ) -> CountedTool | Callable[[Callable[..., Any]], CountedTool]:
        """``@box.tool`` or ``@box.tool(name=..., idempotent=False)``: ``hango.tool`` on a sync
        or async function, counted by this box. Raises what ``hango.tool`` raises."""

        def build(f: Callable[..., Any]) -> CountedTool:
            return CountedTool(tool(name=name, idempotent=idempotent)(f), self)

        return build if func is None else build(func)

    async def _enter(self, name: str, label: str) -> None:
        self.started.append(label)
        kills = self._kills.get(name, 0)
        if kills:
            self._kills[name] = kills - 1
            raise Killed(f"killed in tool {name}")
        hold = self._holds.get(name)
        if hold is not None:
            hold.entered.set()
            await hold.released.wait()
        self.executed.append(label)


class CountedTool:
    """A ``FunctionTool`` whose calls a ``ToolBox`` counts (see ``ToolBox``)."""

    def __init__(self, inner: FunctionTool, box: ToolBox) -> None:
        self.inner = inner
        self.box = box
        self.idempotent = inner.idempotent
        params = inspect.signature(inner.func).parameters
        self._order = [p for p in params if p != inner.context_param]

    @property
    def spec(self) -> ToolSpec:
        return self.inner.spec

    def label(self, input: dict[str, Any]) -> str:
        values = (str(input[p]) for p in self._order if p in input)
        return " ".join([self.spec.name, *values])

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        label = self.label(input)
        await self.box._enter(self.spec.name, label)
        result = await self.inner.call(input, ctx)
        self.box.completed.append(label)
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Whatever else a tool declares (attributes the loop reads) is the inner tool's.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def clear_all_boxes() -> None:
    """Empty every live ``ToolBox`` (the pytest plugin calls it before each test)."""
    for box in list(_BOXES):
        box.clear()
