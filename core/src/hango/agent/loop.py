"""The agent loop: model -> tool batch -> model ... until the model ends its turn.

The loop owns no persistence and no policy. It calls the model and tools through the chain,
keeps the invariant that every tool_use in history has a result before the next model call,
emits events, and calls ``checkpoint`` at every turn boundary and after every tool result, so a
run stopped anywhere resumes from what was saved without re-running a call that finished.

A run starts and resumes the same way: from its history. If the history ends with an assistant
message whose calls lack results, that batch is finished first (only the missing calls run).

What is sent is always a request a strict provider accepts: an assistant message with no
content (an empty end_turn, which real models return) stays in the history, as the record of
what the model said, but is never sent back, and neither is a blank text block. A tool call
cut off by ``max_tokens`` is never executed: its arguments may be incomplete, so it is answered
with an error result saying so.

A middleware may pause a call for a person's decision (``hango.agent.interrupts``). The call does
not run and leaves no trace in the state; the batch's later calls do not run either, but are
asked whether they would pause too; the loop then returns ``suspended`` with the questions in
``state.interrupts``. Resumed with decisions, the batch goes on from the paused call.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
import attrs
import jsonschema
from attrs import frozen

from hango import telemetry
from hango.agent import spans
from hango.agent.chain import Chain
from hango.agent.events import (
    AttemptDiscarded,
    Event,
    InterruptRaised,
    MessageCompleted,
    RunStatus,
    TodosUpdated,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from hango.agent.interrupts.records import (
    Interrupt,
    InterruptError,
    PendingAction,
    StartedCall,
    argument_digest,
)
from hango.agent.interrupts.trace import raised
from hango.agent.middleware import CallProgress, ModelRequest, ToolCallRequest
from hango.agent.state import State
from hango.agent.storable import DEFAULT_MAX_RESULT_CHARS, storable_message, storable_result
from hango.provider.events import ProviderRetry, StreamEvent
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
from hango.redact import redact_secrets
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


@contextlib.asynccontextmanager
async def _closing(stream: AsyncIterator[StreamEvent]) -> AsyncIterator[AsyncIterator[StreamEvent]]:
    """``stream``, closed (``aclose``) as soon as the block is left, however it is left.

    Without it an abandoned async generator is closed only when the garbage collector finds it,
    which is never while the model object keeps a reference to it: its ``finally`` (the HTTP
    response it holds) would wait that long.
    """
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


class _Attempts:
    """Whether the model call in progress has streamed events that its response may not keep.

    A model wrapper may call the model again (a retry) or replace what it returned; the deltas
    of the attempt it dropped have already reached the caller. ``AttemptDiscarded`` tells the
    caller to forget them, before the next attempt's first delta or before ``MessageCompleted``.
    """

    __slots__ = ("kept", "streamed")

    def __init__(self) -> None:
        self.streamed = False  # events of the latest attempt reached the caller
        self.kept: Message | None = None  # what the latest attempt produced

    def start(self) -> bool:
        """A new attempt begins; True when the previous one streamed and must be discarded."""
        discard = self.streamed
        self.streamed = False
        self.kept = None
        return discard

    def discarded_by(self, response: ModelResponse) -> bool:
        """True when the chain's ``response`` is not what the streamed attempt produced."""
        return self.streamed and response.message != self.kept


def _sendable(messages: list[Message]) -> tuple[Message, ...]:
    """The history as sent: without blank text blocks and without messages left empty.

    Providers reject both (Anthropic: "all messages must have non-empty content"); an empty
    message carries nothing for the model, and the user messages around a dropped assistant
    message are merged by the provider. Untouched messages are sent as the same objects.
    """
    out: list[Message] = []
    for m in messages:
        if any(_blank(b) for b in m.content):
            m = Message(m.role, tuple(b for b in m.content if not _blank(b)))
        if m.content:
            out.append(m)
    return tuple(out)


def _blank(block: object) -> bool:
    return isinstance(block, TextBlock) and not block.text.strip()


_CUT_OFF = ToolResult(
    "This tool call was cut off by max_tokens before its arguments were complete, so it was "
    "not run. Call it again if you still need it.",
    is_error=True,
)


def _truncated(response: ModelResponse) -> ToolUseBlock | None:
    """The tool call cut off by ``max_tokens``: the last block of such a response, if a call.

    Its arguments may be missing or cut short (a ``{}`` that never was), so it is not run.
    """
    if response.stop_reason is not StopReason.MAX_TOKENS or not response.message.content:
        return None
    last = response.message.content[-1]
    return last if isinstance(last, ToolUseBlock) else None


class _WouldRun(BaseException):
    """Raised by the innermost handler of a probe: no middleware paused the call."""


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


def held_calls(state: State) -> frozenset[str]:
    """Ids of the calls a resumed run finishes itself, which a history repair must leave
    unanswered: the unfinished calls of a batch suspended for decisions, and every call that
    started without a saved result (its outcome is unknown; only the loop may decide what
    happens to it)."""
    held = set(state.interrupts.started)
    if state.interrupts.pending:
        held.update(c.id for c in pending_calls(state.messages))
    return frozenset(held)


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
    attempts = _Attempts()

    model_attributes = spans.model_attributes(model)

    async def call_model(mreq: ModelRequest) -> ModelResponse:
        req, called, target = mreq.request, mreq.model, model_attributes
        if called is None:
            called = model
        elif called is not model:
            # A wrapper swapped the model for this call: the request and the chat span name
            # the model actually called (its class when it has no name: never the run's).
            target = spans.model_attributes(called)
            req = attrs.evolve(req, model=getattr(called, "name", None) or type(called).__name__)
        # A middleware's own call (a summary) is not the turn: nothing of it reaches the caller.
        own = mreq.purpose == "turn"
        if own and attempts.start():
            await emit(AttemptDiscarded(turns + 1))
        with spans.chat_span(req, target) as chat:
            acc = Accumulator()
            async with _closing(called.stream(req)) as stream:
                async for event in stream:
                    acc.add(event)
                    if own:
                        # A provider's retry notice is not part of what the attempt said.
                        attempts.streamed = attempts.streamed or type(event) is not ProviderRetry
                        await emit(event)
            response = acc.response()
            if own:
                attempts.kept = response.message
            chat.finished(response)
            return response

    async def execute(treq: ToolCallRequest) -> ToolResult:
        call, tool, scope = treq.call, treq.tool, treq.progress
        if scope.probe:
            raise _WouldRun
        if tool is None:
            return error_result("unknown tool %r", call.name)
        if not isinstance(call.input, dict):
            return error_result(
                "arguments for tool %r are not a JSON object: %.200s", call.name, call.input
            )
        try:
            problem = validators.error(tool.spec, call.input)
            # A copy: a tool that keeps or mutates its arguments must not change the history.
            arguments = copy.deepcopy(call.input)
        except RecursionError:
            return error_result("arguments for tool %r nest too deeply to be used", call.name)
        if problem is not None:
            return error_result("invalid arguments for tool %r: %s", call.name, problem)
        book = state.interrupts
        started = book.started.get(call.id)
        if started is not None and not (scope.decided or scope.started):
            # Started by a pass that stopped before saving its result: no one decided to
            # run it again.
            return outcome_unknown(call, started)
        if scope.decided or not getattr(tool, "idempotent", True):
            # Saved before it runs: a resumed run must know this call may have taken effect,
            # and the decision it runs on is used up.
            book.start(call.id, call.name, argument_digest(call.name, call.input))
            scope.started = True
            await checkpoint(state)
        return await tool.call(arguments, ToolContext(treq.state, call))

    async def run_call(call: ToolUseBlock, tools: Mapping[str, Tool]) -> ToolResult | Interrupt:
        scope = CallProgress(tools)
        undo = _Undo(state)
        with spans.tool_span(call) as span:
            try:
                result = await chain.tool_call(
                    ToolCallRequest(call, tools.get(call.name), state, progress=scope), execute
                )
            except Interrupt as pause:
                undo()
                _check_pause(pause, scope)
                raised(pause.action)
                return pause
            if result.is_error:
                # An error often quotes what failed: a key or token must not reach the
                # history, the model or the caller.
                result = ToolResult(redact_secrets(result.content), is_error=True)
            span.finished(result)
        return result

    async def would_pause(call: ToolUseBlock, tools: Mapping[str, Tool]) -> Interrupt | None:
        # The chain runs as for the call itself, but its innermost handler stops before the
        # tool; whatever the chain did to the state is undone.
        undo = _Undo(state)
        probe = ToolCallRequest(
            call, tools.get(call.name), state, progress=CallProgress(tools, probe=True)
        )
        try:
            await chain.tool_call(probe, execute)
        except Interrupt as pause:
            raised(pause.action)
            return pause
        except _WouldRun:
            pass
        finally:
            undo()
        return None

    async def run_batch(
        calls: tuple[ToolUseBlock, ...],
        tools: Mapping[str, Tool],
        answered: Mapping[str, ToolResult] | None = None,
    ) -> list[PendingAction]:
        """Run ``calls`` in order; returns the questions the batch paused on (none: done). A
        call in ``answered`` already has its result in the history and is only reported."""
        paused: list[PendingAction] = []
        for call in calls:
            if answered and call.id in answered:
                await emit(ToolCallStarted(call))
                await emit(ToolCallFinished(call, answered[call.id]))
                continue
            if paused:
                # A call before this one waits for a decision, so this one does not run yet;
                # asking whether it would pause too puts every question of the batch in one
                # round of decisions.
                pause = await would_pause(call, tools)
            else:
                await emit(ToolCallStarted(call))
                todos_before = state.todos
                outcome = await run_call(call, tools)
                if isinstance(outcome, ToolResult):
                    result = outcome
                    content = storable_result(result.content, settings.max_result_chars)
                    block = ToolResultBlock(call.id, content, result.is_error)
                    _add_result(state.messages, block)
                    state.interrupts.finish(call.id)
                    await checkpoint(state)
                    await emit(ToolCallFinished(call, result))
                    if state.todos is not todos_before:
                        telemetry.record_todos(t.status for t in state.todos)
                        await emit(TodosUpdated(tuple(state.todos)))
                    continue
                pause = outcome
            if pause is not None:
                state.interrupts.ask(pause.action)
                paused.append(pause.action)
                await emit(InterruptRaised(pause.action))
        # Per-batch data must not leak into the next batch or a resumed run.
        state.scratch.clear()
        return paused

    def tools_now() -> dict[str, Tool]:
        tools = {t.spec.name: t for t in view}
        for t in chain.tools(state):
            if t.spec.name in tools:
                raise ValueError(f"two tools are named {t.spec.name!r}")
            tools[t.spec.name] = t
        return tools

    def suspended() -> LoopOutcome:
        # The runner saves the questions with the history and this status, in one save.
        return LoopOutcome(RunStatus.SUSPENDED, stop_reason, None, usage, turns)

    def stopped() -> LoopOutcome | None:
        if stop is None or not stop.is_set():
            return None
        return LoopOutcome(RunStatus.QUEUED, stop_reason, None, usage, turns)

    async def save() -> None:
        await checkpoint(state)

    turns = turns_taken(state.messages)
    unfinished = pending_calls(state.messages)
    if unfinished:
        if await run_batch(unfinished, tools_now()):
            return suspended()
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
            messages=_sendable(state.messages),
            system=settings.system,
            tools=tuple(t.spec for t in tools.values()),
            max_tokens=settings.max_tokens,
            tool_choice=settings.tool_choice,
            parallel_tool_calls=settings.parallel_tool_calls,
            server_tools=settings.server_tools,
        )
        with telemetry.tracer.start_as_current_span("turn", attributes={telemetry.TURN: turns + 1}):
            mreq = ModelRequest(request, state, model=model, save=save, emit=emit)
            response = await chain.model_call(mreq, call_model)
            if attempts.discarded_by(response):
                await emit(AttemptDiscarded(turns + 1))
            attempts.start()
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
            answered: dict[str, ToolResult] = {}
            if (cut := _truncated(response)) is not None:
                # Answered in the same save as the message, so no resume can ever run it.
                answered[cut.id] = _CUT_OFF
                _add_result(state.messages, ToolResultBlock(cut.id, _CUT_OFF.content, True))
            await checkpoint(state)
            if calls and await run_batch(calls, tools, answered):
                return suspended()
            await emit(TurnFinished(turns))
            if outcome := stopped():
                return outcome


class _Undo:
    """Undoes what a paused call's chain did to the state (private values and the plan): a
    paused call was not made, so a middleware that counted it must not have counted it."""

    __slots__ = ("private", "state", "todos")

    def __init__(self, state: State) -> None:
        self.state = state
        self.private = dict(state.private)  # values are replaced by store_private, never mutated
        self.todos = state.todos

    def __call__(self) -> None:
        self.state.private.clear()
        self.state.private.update(self.private)
        self.state.todos = self.todos


def outcome_unknown(call: ToolUseBlock, started: StartedCall) -> ToolResult:
    """The error result of a call that started and whose result was never saved."""
    return error_result(
        "Outcome unknown: tool %r started at %s but the run stopped before its result was "
        "saved, so it may or may not have taken effect. It was not run again; check its effect "
        "before calling it again.",
        call.name,
        started.started_at,
    )


def _check_pause(pause: Interrupt, scope: CallProgress) -> None:
    if scope.executed:
        action = pause.action
        raise InterruptError(
            f"interrupt {action.name!r} of middleware {action.middleware!r} reached the loop "
            f"after tool call {action.tool_call_id!r} ran; an interrupt must come before the "
            "call runs"
        ) from None


def _add_result(messages: list[Message], result: ToolResultBlock) -> None:
    """Add ``result`` to the user message that answers the last assistant message, creating it
    on the first result, so a batch is always answered by ONE message, in call order."""
    last = messages[-1]
    if last.role == "user" and last.tool_results:
        order = {use.id: i for i, use in enumerate(messages[-2].tool_uses)}
        blocks = sorted(
            (*last.content, result),
            key=lambda b: order.get(b.tool_use_id, 0) if isinstance(b, ToolResultBlock) else 0,
        )
        messages[-1] = Message("user", tuple(blocks))
    else:
        messages.append(Message("user", (result,)))
