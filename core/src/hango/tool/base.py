"""Tools: what a model can call. ``Tool`` is the protocol, ``ToolResult`` its answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from attrs import field, frozen

from hango.provider.messages import ToolSpec, ToolUseBlock

if TYPE_CHECKING:
    from hango.agent.state import State


@frozen
class ToolResult:
    """What a tool call returns to the model: text ``content``; ``is_error`` marks a failure the
    model should see and react to (it does not fail the run).

    ``exception`` is the exception the tool raised when the chain's innermost guard turned it
    into this error result (None otherwise: a tool's own error result, an unknown tool, or
    arguments that failed validation, which raise nothing). It lets a wrapper such as tool
    retry tell a raised failure from the others; it is never persisted or compared.
    """

    content: str
    is_error: bool = False
    exception: BaseException | None = field(default=None, eq=False, repr=False)


def error_result(fmt: str, *args: object) -> ToolResult:
    """An error ``ToolResult`` with ``fmt % args`` as content (the seed's ``tool.Errorf``)."""
    return ToolResult(fmt % args if args else fmt, is_error=True)


@frozen
class ToolContext:
    """Passed to every tool call: the run's ``state`` and the ``call`` being answered."""

    state: State
    call: ToolUseBlock


@runtime_checkable
class Tool(Protocol):
    """A callable tool: its ``spec`` and ``call``.

    ``call`` receives arguments already validated against ``spec.input_schema``. An exception
    it raises (other than cancellation) becomes an error result carrying the exception's message.
    """

    @property
    def spec(self) -> ToolSpec: ...

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult: ...
