"""The agent loop: model -> tool batch -> model ... until the model ends its turn.

The loop owns no persistence and no policy. It calls the model and tools through the chain,
keeps the invariant that every tool_use in history has a result before the next model call,
emits events, and calls ``checkpoint`` at every turn boundary and after every tool result, so a
run stopped anywhere resumes from what was saved without re-running a call that finished.

``AgentLoop`` is one pass of a run, in named steps: ``resume_frontier`` (finish the batch a
stopped run left), ``call_model``, ``run_batch``, ``checkpoint``. A run starts and resumes the
same way: from its history. If the history ends with an assistant message whose calls lack
results, that batch is finished first (only the missing calls run).

What is sent is always a request a strict provider accepts (``hango.agent.history``, kept up
to date as the history grows rather than rebuilt per call). A tool call cut off by
``max_tokens`` is never executed: its arguments may be incomplete, so it is answered with an
error result saying so.

The calls of one response run concurrently, at most ``max_tool_concurrency`` at a time; a
sequential tool (``sequential=True`` or ``sequential_tools``) runs alone, as a barrier between
the calls before and after it. The chain's code for the calls of a batch runs one call at a
time (a lock, released while a tool itself runs), so a wrapper's read-modify-write of its
state, a checkpoint and a paused call's undo never interleave with a sibling's; tools overlap.
Results go into history in call order whenever they complete, each checkpointed at once.
A tool that fails gets an error result and its siblings go on; cancelling the run cancels the
running tools and keeps every result already saved (docs/explanation/concurrent-tools.md).

A middleware may pause a call for a person's decision (``hango.agent.interrupts``). The call does
not run and leaves no trace in the state; calls of the batch already running finish, the later
ones do not run but are asked whether they would pause too; the loop then returns
``suspended`` with the questions in ``state.interrupts``. Resumed with decisions, the batch
goes on from the paused call.

An agent with an output schema ends its run with a validated output (``hango.agent.output``):
an invalid one goes back to the model with the reason, up to ``output_retries`` times.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from typing import Any

import anyio
import attrs
import jsonschema
from attrs import field, frozen

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
from hango.agent.history import Sendable
from hango.agent.interrupts.records import (
    Interrupt,
    InterruptError,
    PendingAction,
    RanCall,
    StartedCall,
    argument_digest,
)
from hango.agent.interrupts.trace import raised
from hango.agent.middleware import CallProgress, ModelRequest, ToolCallRequest
from hango.agent.output import (
    FINAL_ANSWER,
    OutputCheck,
    final_calls,
    lower,
    parse_text,
    prefers_native,
    strictable,
)
from hango.agent.state import State
from hango.agent.storable import DEFAULT_MAX_RESULT_CHARS, storable_message, storable_result
from hango.provider.events import ProviderRetry, StreamEvent
from hango.provider.messages import (
    JSON,
    Message,
    OutputSpec,
    OutputStrategy,
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
from hango.tool.base import DEFAULT_TOOL_TIMEOUT, Tool, ToolContext, ToolResult, error_result
from hango.tool.registry import ToolView

Emit = Callable[[Event], Awaitable[None]]
Checkpoint = Callable[[State], Awaitable[None]]

#: Tool calls of one response that run at once unless the agent says otherwise.
DEFAULT_MAX_TOOL_CONCURRENCY = 8


def _names(names: Collection[str]) -> frozenset[str]:
    return frozenset(names)


@frozen
class LoopSettings:
    """What the loop needs of an agent: the model name sent in requests, the agent's own
    system blocks, the turn limit (model calls per run), ``max_tokens`` per call, and the
    request's tool options (``Request.tool_choice``, ``parallel_tool_calls``, ``server_tools``),
    which a middleware may still change per call, and the characters of a tool result kept in
    history (``storable_result``).

    ``output_schema`` (a JSON Schema object) makes the run end with a validated output, asked
    for by ``output_strategy`` (None: native when the model has it, else the final-answer
    tool); ``output_type`` structures it (and runs its validators); ``output_retries`` is how
    many invalid outputs the model may correct. ``max_tool_concurrency`` calls of a batch run
    at once; tools named in ``sequential_tools`` run alone. A tool call may take
    ``tool_timeouts[name]`` seconds, else the tool's own ``timeout``, else ``tool_timeout``.
    """

    model: str
    system: tuple[TextBlock, ...] = ()
    max_turns: int = 25
    max_tokens: int = 4096
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    server_tools: tuple[Mapping[str, Any], ...] = ()
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    output_schema: Mapping[str, Any] | None = None
    output_strategy: OutputStrategy | None = None
    output_type: type | None = None
    output_retries: int = 2
    max_tool_concurrency: int = DEFAULT_MAX_TOOL_CONCURRENCY
    sequential_tools: frozenset[str] = field(default=frozenset(), converter=_names)
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    tool_timeouts: Mapping[str, float] = field(factory=dict)


@frozen
class LoopOutcome:
    """How a pass ended. ``output`` is the run's validated output (an ``output_type``
    instance, or its JSON) when it completed with one."""

    status: RunStatus
    stop_reason: StopReason | None
    error: str | None
    usage: Usage
    turns: int
    output: Any = None


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


class _SaveFailed(BaseException):
    """A save made inside the innermost tool handler failed (the database is away, the lease
    lost). Carried through the chain, which would turn an ``Exception`` there into the tool's
    error result, to the loop, which raises ``error``: the run stops, the tool did not fail."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


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
    happens to it) or whose body returned a result not saved in the history yet (the loop
    answers it with that result), and the unfinished calls of a batch a step boundary ended
    a pass in."""
    held = set(state.interrupts.started) | set(state.interrupts.ran)
    if state.interrupts.pending or state.interrupts.stepped:
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


_ACCEPTED = ToolResult("Final answer accepted.")
_NOT_USED = ToolResult(
    "Not used: an earlier final_answer call in this response was taken.", is_error=True
)
_NOT_RUN = ToolResult("Not run: the run ended because its output stayed invalid.", is_error=True)


class _Start:
    """The turn of one call of a concurrent batch: it begins once the call before it
    (``prev``) is under way (its tool runs, or it ended without one), so the chain sees the
    calls in call order on asyncio and trio alike; ``fire`` lets the next one begin."""

    __slots__ = ("_event", "fired", "prev")

    def __init__(self, prev: _Start | None = None) -> None:
        self.prev = prev
        self.fired = False
        self._event: anyio.Event | None = None  # made only when a successor has to wait

    async def wait_turn(self) -> None:
        prev, self.prev = self.prev, None
        if prev is not None and not prev.fired:
            if prev._event is None:
                prev._event = anyio.Event()
            await prev._event.wait()

    def fire(self) -> None:
        if not self.fired:
            self.fired = True
            if self._event is not None:
                self._event.set()


async def _take(semaphore: anyio.Semaphore) -> None:
    """Acquire ``semaphore``, without a trip through the event loop when it is free (a batch
    of instant calls would otherwise pay one per acquire)."""
    try:
        semaphore.acquire_nowait()
    except anyio.WouldBlock:
        await semaphore.acquire()


def _release(batch: _Batch) -> None:
    """Let the batch's next call begin and its chains run while this call's work runs."""
    batch.current.fire()
    batch.lock.release()


async def _retake(batch: _Batch) -> None:
    # Shielded: a cancelled call must hold the lock again before its chain unwinds.
    with anyio.CancelScope(shield=True):
        await _take(batch.lock)


class _Batch:
    """One tool batch in progress: ``lock`` serializes the chain's code, the checkpoints and
    the pauses of its calls (released while a tool runs), ``limiter`` caps the calls running
    at once, ``paused`` collects the questions asked, ``current`` is the start of the call
    whose chain is running up to its tool."""

    __slots__ = ("current", "limiter", "lock", "paused")

    def __init__(self, concurrency: int) -> None:
        # A semaphore, not a Lock: a wrapper may run ``next`` in a task of its own, and a
        # Lock may only be released by the task that took it.
        self.lock = anyio.Semaphore(1)
        self.limiter = anyio.Semaphore(concurrency)
        self.paused: list[PendingAction] = []
        self.current = _Start()


class AgentLoop:
    """One pass of a run over ``state``: the steps ``resume_frontier``, ``call_model``,
    ``run_batch`` and ``checkpoint``, driven by ``run``.

    ``chain`` wraps every model and tool call, ``model`` answers, ``view`` is the agent's
    tools (the chain's tool providers add theirs per turn), ``emit`` receives the events and
    ``checkpoint`` saves the state; ``stop``, once set, ends the pass at the next turn
    boundary (status ``queued``). ``step_done`` is called after each step is saved (a model
    response, one tool call's result); once it returns True the pass ends there with status
    ``running`` (the execution seam, ``hango.run.step``, which runs a limited pass's batches
    one call at a time).
    """

    def __init__(
        self,
        state: State,
        *,
        chain: Chain,
        model: Model,
        view: ToolView,
        settings: LoopSettings,
        emit: Emit,
        checkpoint: Checkpoint,
        stop: anyio.Event | None = None,
        step_done: Callable[[], bool] | None = None,
    ) -> None:
        self.state = state
        self.chain = chain
        self.model = model
        self.view = view
        self.settings = settings
        self.emit = emit
        self._save = checkpoint
        self.stop = stop
        self._step_done = step_done
        self._stepped = False  # ``step_done`` ended the pass
        self._ran_here: set[str] = set()  # calls whose body returned in this pass
        self.usage = Usage()
        self.stop_reason: StopReason | None = None
        self.turns = turns_taken(state.messages)
        self._validators = _Validators()
        self._attempts = _Attempts()
        self._model_attributes = spans.model_attributes(model)
        self._history = Sendable(state.messages)
        self._batch: _Batch | None = None
        self._output: OutputSpec | None = None
        self._check: OutputCheck | None = None
        if settings.output_schema is not None:
            schema = settings.output_schema
            strategy = settings.output_strategy or ("native" if prefers_native(model) else "tool")
            self._output = OutputSpec(schema, strategy, strict=strictable(schema))
            self._check = OutputCheck(schema, settings.output_type)
        # The output spec of the latest model call as its innermost handler saw it (a wrapper
        # may have rewritten or dropped it): what that call's answer is checked against.
        self._asked: OutputSpec | None = None

    # -- the pass ----------------------------------------------------------------------------

    async def run(self) -> LoopOutcome:
        """Run to the end of the agent's turn; see ``run_loop``."""
        # This pass goes on with the batch; should it end by a crash, nothing says it was stepped.
        self.state.interrupts.stepped = False
        outcome = await self.resume_frontier()
        while outcome is None:
            outcome = await self.turn()
        return outcome

    async def resume_frontier(self) -> LoopOutcome | None:
        """Finish the batch the history ends with (a run stopped mid-batch or suspended), or
        nothing; returns the outcome when the pass ends there."""
        unfinished = pending_calls(self.state.messages)
        if not unfinished:
            return None
        paused = await self.run_batch(unfinished, self.tools_now())
        if self._stepped:
            return self._step_ended()
        if paused:
            return self._ended(RunStatus.SUSPENDED)
        await self.emit(TurnFinished(self.turns))
        if self.state.output is not None:
            # The final answer was taken before the batch's other calls were finished.
            return self._completed()
        return self._stopped()

    async def turn(self) -> LoopOutcome | None:
        """One model call and its tool batch; the outcome when the pass ends with it."""
        settings, state = self.settings, self.state
        if self.turns >= settings.max_turns:
            return self._ended(RunStatus.FAILED, f"max_turns ({settings.max_turns}) reached")
        tools = self.tools_now()
        with telemetry.tracer.start_as_current_span(
            "turn", attributes={telemetry.TURN: self.turns + 1}
        ):
            response = await self.call_model(tools)
            calls = response.message.tool_uses
            answered: dict[str, ToolResult] = {}
            if (cut := _truncated(response)) is not None:
                # Answered in the same save as the message, so no resume can ever run it.
                answered[cut.id] = _CUT_OFF
            asked = self._asked if self._check is not None else None
            failed: str | None = None
            if asked is not None and asked.strategy == "tool":
                failed = self._final_answers(response, calls, answered)
            if not calls and self.stop_reason is not StopReason.PAUSE_TURN:
                if asked is None:
                    self._step()  # the last step: the run ends here anyway
                    # The runner saves this message together with the final status, atomically.
                    return self._ended(RunStatus.COMPLETED)
                failed = self._text_answer(response, asked)
                if failed is None:
                    self._step()
                    return self._completed()
            if failed is not None:
                state.output_failures += 1
                if state.output_failures > settings.output_retries:
                    for call in calls:
                        answered.setdefault(call.id, _NOT_RUN)
                    self._answer(answered)
                    return self._ended(
                        RunStatus.FAILED,
                        f"output invalid after {state.output_failures} attempts: {failed}",
                    )
                if not calls:
                    state.messages.append(Message.user(_retry_text(failed, asked)))
            self._answer(answered)
            await self.checkpoint()
            if self._step():
                return self._step_ended()
            paused = await self.run_batch(calls, tools, answered) if calls else []
            if self._stepped:
                return self._step_ended()
            if paused:
                return self._ended(RunStatus.SUSPENDED)
            await self.emit(TurnFinished(self.turns))
            if state.output is not None:
                return self._completed()
            return self._stopped()

    def _answer(self, answered: Mapping[str, ToolResult]) -> None:
        for call_id, result in answered.items():
            block = ToolResultBlock(call_id, result.content, result.is_error)
            _add_result(self.state.messages, block)

    # -- structured output ---------------------------------------------------------------------

    def _problem(self, value: JSON, response: ModelResponse) -> str | None:
        assert self._check is not None
        check, asked = self._check, self._asked
        if asked is not None and asked.schema is not check.schema:
            # A wrapper rewrote the schema for this call: the answer is held to what was asked.
            check = OutputCheck(asked.schema, self.settings.output_type)
        problem = check.problem(value)
        if problem is None and response.output_error is not None:
            problem = response.output_error
        return problem

    def _final_answers(
        self,
        response: ModelResponse,
        calls: tuple[ToolUseBlock, ...],
        answered: dict[str, ToolResult],
    ) -> str | None:
        """Answers the final-answer calls of ``response`` (the first valid one is taken, the
        others are answered too, so the next request is valid); returns why none was valid,
        None when one was taken or there was none. Other calls are left to the batch."""
        finals = [c for c in final_calls(calls) if c.id not in answered]
        if not finals:
            return None  # no final answer yet (a prose one is ``_text_answer``'s)
        problems: list[str] = []
        for call in finals:
            if self.state.output is not None:
                answered[call.id] = _NOT_USED
                continue
            problem = (
                "the arguments are not a JSON object"
                if not isinstance(call.input, dict)
                else self._problem(call.input, response)
            )
            if problem is None:
                self.state.output = call.input
                answered[call.id] = _ACCEPTED
            else:
                problems.append(problem)
                answered[call.id] = error_result(
                    "Invalid final answer: %s. Call %s again with corrected arguments.",
                    problem,
                    FINAL_ANSWER,
                )
        return None if self.state.output is not None else problems[0]

    def _text_answer(self, response: ModelResponse, asked: OutputSpec) -> str | None:
        """Takes the output in the text of a response without calls; returns why it is not
        valid, or None when it was taken."""
        if asked.strategy == "tool":
            return f"the final answer must be given by calling the {FINAL_ANSWER} tool"
        value, problem = parse_text(response.message.text)
        if problem is None:
            problem = self._problem(value, response)
        if problem is None:
            self.state.output = value
        return problem

    def _completed(self) -> LoopOutcome:
        value = self.state.output
        if self._check is not None and value is not None:
            value = self._check.typed(value)
        return attrs.evolve(self._ended(RunStatus.COMPLETED), output=value)

    # -- the model -----------------------------------------------------------------------------

    async def call_model(self, tools: Mapping[str, Tool]) -> ModelResponse:
        """One model call through the chain with the history as sent and ``tools``; the
        response is added to the history, its usage counted and ``MessageCompleted`` emitted."""
        settings, state = self.settings, self.state
        request = Request(
            model=settings.model,
            messages=self._history.view(state.messages),
            system=settings.system,
            tools=tuple(t.spec for t in tools.values()),
            max_tokens=settings.max_tokens,
            tool_choice=settings.tool_choice,
            parallel_tool_calls=settings.parallel_tool_calls,
            server_tools=settings.server_tools,
            output=self._output,
        )
        mreq = ModelRequest(request, state, model=self.model, save=self.checkpoint, emit=self.emit)
        response = await self.chain.model_call(mreq, self._stream)
        if self._attempts.discarded_by(response):
            await self.emit(AttemptDiscarded(self.turns + 1))
        self._attempts.start()
        response = attrs.evolve(response, message=storable_message(response.message))
        self.turns += 1
        self.usage += response.usage
        state.usage += response.usage
        self.stop_reason = response.stop_reason
        state.messages.append(response.message)
        await self.emit(MessageCompleted(response.message, response.stop_reason, response.usage))
        return response

    async def _stream(self, mreq: ModelRequest) -> ModelResponse:
        """The innermost model handler: streams the (lowered) request from the model."""
        req, called, target = mreq.request, mreq.model, self._model_attributes
        # A middleware's own call (a summary) is not the turn: nothing of it reaches the caller.
        own = mreq.purpose == "turn"
        if own:
            self._asked = req.output
        req = lower(req)
        if called is None:
            called = self.model
        elif called is not self.model:
            # A wrapper swapped the model for this call: the request and the chat span name
            # the model actually called (its class when it has no name: never the run's).
            target = spans.model_attributes(called)
            req = attrs.evolve(req, model=getattr(called, "name", None) or type(called).__name__)
        attempts = self._attempts
        if own and attempts.start():
            await self.emit(AttemptDiscarded(self.turns + 1))
        with spans.chat_span(req, target) as chat:
            acc = Accumulator()
            async with _closing(called.stream(req)) as stream:
                async for event in stream:
                    acc.add(event)
                    if own:
                        # A provider's retry notice is not part of what the attempt said.
                        attempts.streamed = attempts.streamed or type(event) is not ProviderRetry
                        await self.emit(event)
            response = acc.response()
            if own:
                attempts.kept = response.message
            chat.finished(response)
            return response

    # -- tools ---------------------------------------------------------------------------------

    def tools_now(self) -> dict[str, Tool]:
        """The run's tools by name: the agent's, then each tool provider's."""
        tools = {t.spec.name: t for t in self.view}
        for t in self.chain.tools(self.state):
            if t.spec.name in tools:
                raise ValueError(f"two tools are named {t.spec.name!r}")
            tools[t.spec.name] = t
        if FINAL_ANSWER in tools and self._output is not None and self._output.strategy == "tool":
            raise ValueError(
                f"a tool is named {FINAL_ANSWER!r}, the name of the agent's output tool; "
                "rename the tool"
            )
        return tools

    def _sequential(self, call: ToolUseBlock, tools: Mapping[str, Tool]) -> bool:
        if call.name in self.settings.sequential_tools:
            return True
        return bool(getattr(tools.get(call.name), "sequential", False))

    async def run_batch(
        self,
        calls: tuple[ToolUseBlock, ...],
        tools: Mapping[str, Tool],
        answered: Mapping[str, ToolResult] | None = None,
    ) -> list[PendingAction]:
        """Run ``calls``, concurrently up to ``max_tool_concurrency``, a sequential tool alone;
        returns the questions the batch paused on (none: done). A call in ``answered`` already
        has its result in the history and is only reported."""
        batch = self._batch = _Batch(self.settings.max_tool_concurrency)
        try:
            for group in _groups(calls, lambda c: self._sequential(c, tools)):
                if len(group) == 1 or self.settings.max_tool_concurrency == 1:
                    for call in group:
                        await self._one(call, tools, batch, answered, _Start())
                        if self._stepped:
                            return batch.paused
                    continue
                limited = len(group) > self.settings.max_tool_concurrency
                try:
                    async with anyio.create_task_group() as tg:
                        turn: _Start | None = None
                        for call in group:
                            turn = _Start(turn)
                            tg.start_soon(self._one, call, tools, batch, answered, turn, limited)
                except BaseExceptionGroup as failure:
                    # A tool's own failure is its error result, so this is a middleware's
                    # or the store's: the caller gets it as from a call run alone.
                    raise _first(failure) from None
        finally:
            self._batch = None
            # Per-batch data must not leak into the next batch or a resumed run.
            self.state.scratch.clear()
        return batch.paused

    async def _one(
        self,
        call: ToolUseBlock,
        tools: Mapping[str, Tool],
        batch: _Batch,
        answered: Mapping[str, ToolResult] | None,
        start: _Start,
        limited: bool = False,
    ) -> None:
        """One call of ``batch``: run it, or, after a pause in the batch, ask whether it would
        pause too (putting every question of the batch in one round of decisions).
        ``limited``: the batch has more calls than may run at once (take the limiter)."""
        try:
            await start.wait_turn()
            if not limited:
                await self._call_in_batch(call, tools, batch, answered, start)
                return
            await _take(batch.limiter)
            try:
                await self._call_in_batch(call, tools, batch, answered, start)
            finally:
                batch.limiter.release()
        finally:
            start.fire()

    async def _call_in_batch(
        self,
        call: ToolUseBlock,
        tools: Mapping[str, Tool],
        batch: _Batch,
        answered: Mapping[str, ToolResult] | None,
        start: _Start,
    ) -> None:
        if answered and call.id in answered:
            await self.emit(ToolCallStarted(call))
            await self.emit(ToolCallFinished(call, answered[call.id]))
            return
        await _take(batch.lock)
        try:
            await self._locked(call, tools, batch, start)
        finally:
            batch.lock.release()

    async def _locked(
        self, call: ToolUseBlock, tools: Mapping[str, Tool], batch: _Batch, start: _Start
    ) -> None:
        """The call, with the batch lock held (released while its tool runs)."""
        state = self.state
        batch.current = start
        if batch.paused:
            pause = await self._would_pause(call, tools)
            if pause is not None:
                state.interrupts.ask(pause.action)
                batch.paused.append(pause.action)
                await self.emit(InterruptRaised(pause.action))
            return
        await self.emit(ToolCallStarted(call))
        todos_before = state.todos
        outcome = await self._run_call(call, tools)
        if isinstance(outcome, Interrupt):
            state.interrupts.ask(outcome.action)
            batch.paused.append(outcome.action)
            await self.emit(InterruptRaised(outcome.action))
            return
        content = storable_result(outcome.content, self.settings.max_result_chars)
        _add_result(state.messages, ToolResultBlock(call.id, content, outcome.is_error))
        state.interrupts.finish(call.id)
        await self.checkpoint()
        await self.emit(ToolCallFinished(call, outcome))
        if state.todos is not todos_before:
            telemetry.record_todos(t.status for t in state.todos)
            await self.emit(TodosUpdated(tuple(state.todos)))
        self._step()

    async def _run_call(
        self, call: ToolUseBlock, tools: Mapping[str, Tool]
    ) -> ToolResult | Interrupt:
        scope = CallProgress(tools, unlock=self._unlocked)
        # Exact: the batch lock is held from here to a pause (a pause comes before the tool
        # runs, and the lock is released only while it runs).
        undo = _Undo(self.state)
        with spans.tool_span(call) as span:
            try:
                result = await self.chain.tool_call(
                    ToolCallRequest(call, tools.get(call.name), self.state, progress=scope),
                    self._execute,
                )
            except Interrupt as pause:
                undo()
                _check_pause(pause, scope)
                raised(pause.action)
                return pause
            except _SaveFailed as failed:
                raise failed.error from None
            if result.is_error:
                # An error often quotes what failed: a key or token must not reach the
                # history, the model or the caller.
                result = ToolResult(redact_secrets(result.content), is_error=True)
            span.finished(result)
        return result

    async def _would_pause(self, call: ToolUseBlock, tools: Mapping[str, Tool]) -> Interrupt | None:
        # The chain runs as for the call itself, but its innermost handler stops before the
        # tool; whatever the chain did to the state is undone.
        undo = _Undo(self.state)
        probe = ToolCallRequest(
            call, tools.get(call.name), self.state, progress=CallProgress(tools, probe=True)
        )
        try:
            await self.chain.tool_call(probe, self._execute)
        except Interrupt as pause:
            raised(pause.action)
            return pause
        except _WouldRun:
            pass
        finally:
            undo()
        return None

    async def _execute(self, treq: ToolCallRequest) -> ToolResult:
        """The innermost tool handler: checks the arguments, records a start that must
        survive a crash, and runs the tool with the batch lock released."""
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
            problem = self._validators.error(tool.spec, call.input)
            # A copy: a tool that keeps or mutates its arguments must not change the history.
            arguments = copy.deepcopy(call.input)
        except RecursionError:
            return error_result("arguments for tool %r nest too deeply to be used", call.name)
        if problem is not None:
            return error_result("invalid arguments for tool %r: %s", call.name, problem)
        book = self.state.interrupts
        digest = argument_digest(call.name, call.input)
        ran = book.ran.get(call.id)
        if ran is not None and ran.digest == digest and call.id not in self._ran_here:
            # Its body returned in a pass that stopped before the result was saved: never
            # run it again (a wrapper's own retry within this pass is not affected).
            return ToolResult(ran.content, ran.is_error)
        started = book.started.get(call.id)
        if started is not None and not (scope.decided or scope.started):
            # Started by a pass that stopped before saving its result: no one decided to
            # run it again.
            return outcome_unknown(call, started)
        if scope.decided or not getattr(tool, "idempotent", True):
            # Saved before it runs: a resumed run must know this call may have taken effect,
            # and the decision it runs on is used up.
            book.start(call.id, call.name, digest)
            scope.started = True
            await self._save_in_call()
        ctx = ToolContext(treq.state, call)
        batch = self._batch
        if batch is None:
            result = await self._timed(tool, arguments, ctx)
        else:
            _release(batch)
            try:
                result = await self._timed(tool, arguments, ctx)
            finally:
                await _retake(batch)
        # Saved before any wrapper sees it: a wrapper failing after ``next`` returned (or a
        # crash) must not make the resumed run call the body a second time.
        content = storable_result(result.content, self.settings.max_result_chars)
        book.ran_body(call.id, RanCall.of(call.name, digest, content, result.is_error))
        self._ran_here.add(call.id)
        await self._save_in_call()
        return result

    @contextlib.asynccontextmanager
    async def _unlocked(self) -> AsyncIterator[None]:
        """``CallProgress.unlocked``: a wrapper's work runs as a tool's body does in
        ``_execute``, the batch lock released (the inline form there saves the hot path a
        context manager)."""
        batch = self._batch
        if batch is None:
            yield
            return
        _release(batch)
        try:
            yield
        finally:
            await _retake(batch)

    async def _timed(self, tool: Tool, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """``tool.call`` within the call's timeout; past it, the call is cancelled (a sync
        function's thread abandoned) and answered with an error result, recorded like any
        result, so a resumed run never runs it again."""
        name = ctx.call.name
        seconds = self.settings.tool_timeouts.get(name)
        if seconds is None:
            seconds = getattr(tool, "timeout", None) or self.settings.tool_timeout
        with anyio.move_on_after(seconds):
            return await tool.call(arguments, ctx)
        return error_result(
            "tool %r did not finish within %g s and was stopped; whatever it did before is "
            "not known (tool_timeout / tool_timeouts in the agent file)",
            name,
            seconds,
        )

    # -- saving and ending ---------------------------------------------------------------------

    async def checkpoint(self) -> None:
        """Save the state (the runner's ``checkpoint``)."""
        await self._save(self.state)

    async def _save_in_call(self) -> None:
        """``checkpoint`` from inside the innermost tool handler: a failure is carried to the
        loop (``_SaveFailed``) instead of becoming the tool's error result."""
        try:
            await self.checkpoint()
        except Exception as exc:
            raise _SaveFailed(exc) from exc

    def _step(self) -> bool:
        """A step was saved: True when ``step_done`` ends the pass here."""
        if self._step_done is not None and self._step_done():
            self._stepped = True
        return self._stepped

    def _step_ended(self) -> LoopOutcome:
        # Saved as it is: the next step (any process) goes on from here, with the batch.
        self.state.interrupts.stepped = bool(pending_calls(self.state.messages))
        return self._ended(RunStatus.RUNNING)

    def _ended(self, status: RunStatus, error: str | None = None) -> LoopOutcome:
        # A suspended run: the runner saves the questions with the history and this status,
        # in one save.
        return LoopOutcome(status, self.stop_reason, error, self.usage, self.turns)

    def _stopped(self) -> LoopOutcome | None:
        if self.stop is None or not self.stop.is_set():
            return None
        return self._ended(RunStatus.QUEUED)


def _retry_text(problem: str, asked: OutputSpec | None) -> str:
    how = (
        f"Call the {FINAL_ANSWER} tool with your answer."
        if asked is not None and asked.strategy == "tool"
        else "Reply again with only the JSON object."
    )
    return f"Your final answer was not accepted: {problem}. {how}"


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception that failed a batch: the first leaf that is not the cancellation it
    caused in the siblings."""
    cancelled = anyio.get_cancelled_exc_class()
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    return next((e for e in leaves if not isinstance(e, cancelled)), leaves[0])


def _groups(
    calls: tuple[ToolUseBlock, ...], sequential: Callable[[ToolUseBlock], bool]
) -> list[list[ToolUseBlock]]:
    """``calls`` cut into the runs of calls that may overlap; a sequential call is a group of
    its own, so it runs after everything before it and before everything after it."""
    groups: list[list[ToolUseBlock]] = []
    open_group: list[ToolUseBlock] | None = None
    for call in calls:
        if sequential(call):
            groups.append([call])
            open_group = None
        else:
            if open_group is None:
                open_group = []
                groups.append(open_group)
            open_group.append(call)
    return groups


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
    step_done: Callable[[], bool] | None = None,
) -> LoopOutcome:
    """Run ``state`` to the end of the agent's turn (``AgentLoop(...).run()``).

    Turns are counted from the run's own prompt in the history (``turns_taken``), so a resumed
    run keeps its ``max_turns`` budget. ``stop``, once set, ends the loop at the next turn
    boundary (after a tool batch, all its results saved) with status ``queued``: the run is
    whole and another process can continue it (a worker's SIGTERM). ``step_done``: see
    ``AgentLoop``.

    Returns the outcome. Exceptions from the model (``ModelError``) or a middleware propagate
    to the caller, after the last checkpoint.
    """
    loop = AgentLoop(
        state,
        chain=chain,
        model=model,
        view=view,
        settings=settings,
        emit=emit,
        checkpoint=checkpoint,
        stop=stop,
        step_done=step_done,
    )
    return await loop.run()


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
