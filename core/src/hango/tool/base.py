"""Tools: what a model can call. ``Tool`` is the protocol, ``ToolResult`` its answer."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from attrs import field, frozen

from hango.provider.messages import ToolSpec, ToolUseBlock

if TYPE_CHECKING:
    from hango.agent.state import State


#: Seconds a tool call may take when neither the tool nor the agent says otherwise: long enough
#: for real work (a build, a crawl), short enough that a hung call cannot hold a worker forever.
DEFAULT_TOOL_TIMEOUT = 300.0


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

    @property
    def idempotency_key(self) -> str:
        """A key for this tool call that stays the same when the call is resumed, in any
        process (a UUID5 of the run id and the tool call id): pass it to a service that
        deduplicates requests, so an attempt repeated after a crash is recognised there."""
        return str(uuid.uuid5(self.state.run_id, f"tool call {self.call.id}"))


@runtime_checkable
class Tool(Protocol):
    """A callable tool: its ``spec`` and ``call``.

    ``call`` receives arguments already validated against ``spec.input_schema``. An exception
    it raises (other than cancellation) becomes an error result carrying the exception's message.

    A tool whose effect must not happen twice declares ``idempotent = False`` (an attribute;
    absent means idempotent). The loop then saves that the call started before running it, and
    a resumed run never runs a started call without a saved result again on its own: the call
    gets an error result saying its outcome is unknown, or a person is asked again when an
    approval middleware gates the tool.

    The calls of one model response run concurrently. A tool that must not overlap another
    call (it changes what its siblings read, or its service allows one request at a time)
    declares ``sequential = True`` (absent means False): it runs alone, as a barrier between
    the calls before and after it.

    A call may take ``timeout`` seconds (an attribute; absent or None means the agent's
    ``tool_timeout``, whose default is ``DEFAULT_TOOL_TIMEOUT``); the agent's ``tool_timeouts``
    entry for the tool overrides it. A call past its timeout is cancelled (a sync function's
    thread is abandoned) and answered with an error result; it is never run again.
    """

    @property
    def spec(self) -> ToolSpec: ...

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult: ...
