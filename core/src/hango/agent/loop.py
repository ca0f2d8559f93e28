"""The agent loop: model -> tool batch -> model ... until the model ends its turn.

The loop owns no persistence and no policy. It calls the model and tools through the chain,
keeps the invariant that every tool_use in history has a result before the next model call,
emits events, and calls ``checkpoint`` at every turn boundary and after every tool result, so a
run stopped anywhere resumes from what was saved without re-running a call that finished.

A run starts and resumes the same way: from its history. If the history ends with an assistant
message whose calls lack results, that batch is finished first (only the missing calls run).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import attrs
import jsonschema
from attrs import frozen

from hango import telemetry
from hango.agent.chain import Chain
from hango.agent.events import (
    Event,
    MessageCompleted,
    RunStatus,
    TodosUpdated,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from hango.agent.middleware import ModelRequest, ToolCallRequest
from hango.agent.state import State
from hango.agent.storable import DEFAULT_MAX_RESULT_CHARS, storable_message, storable_result
from hango.provider.messages import (
    Message,
    Request,
    StopReason,
    TextBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)
from hango.provider.model import Accumulator, Model, ModelResponse
from hango.tool.base import Tool, ToolContext, ToolResult, error_result
from hango.tool.registry import ToolView

Emit = Callable[[Event], Awaitable[None]]
Checkpoint = Callable[[State], Awaitable[None]]


@frozen
class LoopSettings:
    """What the loop needs of an agent: the model name sent in requests, the agent's own
    system blocks, the turn limit (model calls per run), ``max_tokens`` per call, and the
    request's tool options (``Request.tool_choice``, ``parallel_tool_calls``, ``server_tools``),
    which a middleware may still change per call, and the characters of a tool result kept in
    history (``storable_result``)."""

    model: str
    system: tuple[TextBlock, ...] = ()
    max_turns: int = 25
    max_tokens: int = 4096
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    server_tools: tuple[Mapping[str, Any], ...] = ()
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS


@frozen
class LoopOutcome:
    status: RunStatus
    stop_reason: StopReason | None
    error: str | None
    usage: Usage
    turns: int


class _Validators:
    """JSON Schema validators per tool spec, compiled once."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[ToolSpec, Any]] = {}

    def error(self, spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
        entry = self._cache.get(id(spec))
        if entry is None or entry[0] is not spec:
            cls = jsonschema.validators.validator_for(spec.input_schema)
            entry = (spec, cls(spec.input_schema))
            self._cache[id(spec)] = entry
        best = jsonschema.exceptions.best_match(entry[1].iter_errors(arguments))
        if best is None:
            return None
        return f"{best.json_path}: {best.message}"


def pending_calls(messages: list[Message]) -> tuple[ToolUseBlock, ...]:
    """Calls of the last assistant message that have no result yet: its batch is unfinished.

    Only while nothing but tool results follows it: once the user has written again, those
    calls are dangling history (the repair plugin's business), not a batch to finish.
    """
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            uses = messages[i].tool_uses
            later = messages[i + 1 :]
            if not uses or any(len(m.tool_results) != len(m.content) for m in later):
                return ()
            answered = {r.tool_use_id for m in later for r in m.tool_results}
            return tuple(u for u in uses if u.id not in answered)
    return ()


def turns_taken(messages: list[Message]) -> int:
    """Model calls this run has made: assistant messages after the last user message that is
    not only tool results (the run's own prompt), so it survives history edits before it."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and len(m.tool_results) != len(m.content):
            return sum(1 for later in messages[i + 1 :] if later.role == "assistant")
    return sum(1 for m in messages if m.role == "assistant")


async def run_loop(
    state: State,
    *,
    chain: Chain,
    model: Model,
    view: ToolView,
    settings: LoopSettings,
    emit: Emit,
    checkpoint: Checkpoint,
    stop: anyio.Event | None = None,
) -> LoopOutcome:
    """Run ``state`` to the end of the agent's turn.

    Turns are counted from the run's own prompt in the history (``turns_taken``), so a resumed
    run keeps its ``max_turns`` budget. ``stop``, once set, ends the loop at the next turn
    boundary (after a tool batch, all its results saved) with status ``queued``: the run is
    whole and another process can continue it (a worker's SIGTERM).

    Returns the outcome. Exceptions from the model (``ModelError``) or a middleware propagate
    to the caller, after the last checkpoint.
    """
    validators = _Validators()
    usage = Usage()
    stop_reason: StopReason | None = None

    provider_name = telemetry.provider_name(model)

    async def call_model(mreq: ModelRequest) -> ModelResponse:
        req, called, provider = mreq.request, mreq.model, provider_name
        if called is None:
            called = model
        elif called is not model:
            # A wrapper swapped the model for this call: the request and the chat span name
            # the model actually called (its class when it has no name: never the run's).
            provider = telemetry.provider_name(called)
            req = attrs.evolve(req, model=getattr(called, "name", None) or type(called).__name__)
        with telemetry.chat_span(req, provider) as chat:
            acc = Accumulator()
            async for event in called.stream(req):
                acc.add(event)
                await emit(event)
            response = acc.response()
            chat.finished(response)
            return response

    async def execute(treq: ToolCallRequest) -> ToolResult:
        call, tool = treq.call, treq.tool
        if tool is None:
            return error_result("unknown tool %r", call.name)
        if not isinstance(call.input, dict):
            return error_result(
                "arguments for tool %r are not a JSON object: %.200s", call.name, call.input
            )
        problem = validators.error(tool.spec, call.input)
        if problem is not None:
            return error_result("invalid arguments for tool %r: %s", call.name, problem)
        # A copy: a tool that keeps or mutates its arguments must not change the history.
        return await tool.call(copy.deepcopy(call.input), ToolContext(treq.state, call))

    async def run_batch(calls: tuple[ToolUseBlock, ...], tools: Mapping[str, Tool]) -> None:
        for call in calls:
            await emit(ToolCallStarted(call))
            todos_before = state.todos
            with telemetry.tracer.start_as_current_span(
                f"execute_tool {call.name}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.name,
                    "gen_ai.tool.call.id": call.id,
                },
            ) as span:
                result = await chain.tool_call(
                    ToolCallRequest(call, tools.get(call.name), state), execute
                )
                if result.is_error and span.is_recording():
                    span.set_attribute("error.type", "tool_error")
            content = storable_result(result.content, settings.max_result_chars)
            _add_result(state.messages, ToolResultBlock(call.id, content, result.is_error))
            await checkpoint(state)
            await emit(ToolCallFinished(call, result))
            if state.todos is not todos_before:
                telemetry.record_todos(t.status for t in state.todos)
                await emit(TodosUpdated(tuple(state.todos)))
        # Per-batch data must not leak into the next batch or a resumed run.
        state.scratch.clear()

    def tools_now() -> dict[str, Tool]:
        tools = {t.spec.name: t for t in view}
        for t in chain.tools(state):
            if t.spec.name in tools:
                raise ValueError(f"two tools are named {t.spec.name!r}")
            tools[t.spec.name] = t
        return tools

    def stopped() -> LoopOutcome | None:
        if stop is None or not stop.is_set():
            return None
        return LoopOutcome(RunStatus.QUEUED, stop_reason, None, usage, turns)

    turns = turns_taken(state.messages)
    unfinished = pending_calls(state.messages)
    if unfinished:
        await run_batch(unfinished, tools_now())
        await emit(TurnFinished(turns))
        if outcome := stopped():
            return outcome
    while True:
        if turns >= settings.max_turns:
            return LoopOutcome(
                RunStatus.FAILED,
                stop_reason,
                f"max_turns ({settings.max_turns}) reached",
                usage,
                turns,
            )
        tools = tools_now()
        request = Request(
            model=settings.model,
            messages=tuple(state.messages),
            system=settings.system,
            tools=tuple(t.spec for t in tools.values()),
            max_tokens=settings.max_tokens,
            tool_choice=settings.tool_choice,
            parallel_tool_calls=settings.parallel_tool_calls,
            server_tools=settings.server_tools,
        )
        with telemetry.tracer.start_as_current_span("turn", attributes={"hango.turn": turns + 1}):
            response = await chain.model_call(ModelRequest(request, state, model=model), call_model)
            response = attrs.evolve(response, message=storable_message(response.message))
            turns += 1
            usage += response.usage
            state.usage += response.usage
            stop_reason = response.stop_reason
            state.messages.append(response.message)
            await emit(MessageCompleted(response.message, response.stop_reason, response.usage))
            calls = response.message.tool_uses
            if not calls and stop_reason is not StopReason.PAUSE_TURN:
                # The runner saves this message together with the final status, atomically.
                return LoopOutcome(RunStatus.COMPLETED, stop_reason, None, usage, turns)
            await checkpoint(state)
            if calls:
                await run_batch(calls, tools)
            await emit(TurnFinished(turns))
            if outcome := stopped():
                return outcome


def _add_result(messages: list[Message], result: ToolResultBlock) -> None:
    """Add ``result`` to the user message that answers the last assistant message, creating it
    on the first result, so a batch is always answered by ONE message."""
    last = messages[-1]
    if last.role == "user" and last.tool_results:
        messages[-1] = Message("user", (*last.content, result))
    else:
        messages.append(Message("user", (result,)))
