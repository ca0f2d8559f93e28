"""Run integrity in the loop: every model stream closed at once, a discarded attempt announced,
every request one a strict provider accepts, no call run that the model never finished, no
secret in an error result (issue "Run integrity", items 1, 3, 5, 6, 7 and 16)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hango import (
    AttemptDiscarded,
    Message,
    MessageCompleted,
    ModelError,
    ModelResponse,
    Request,
    RunFinished,
    RunStatus,
    StopReason,
    TextBlock,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolResult,
    ToolResultBlock,
    tool,
)
from hango.middleware import ModelHandler, ModelRequest, ToolCallRequest, ToolHandler
from hango.provider.events import (
    MessageStop,
    ProviderRetry,
    StreamEvent,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango.provider.messages import Usage
from hango.testing import RecordingModel, agent_harness, assert_valid_history, history_problems
from hango_repair import RepairToolCallsMiddleware

pytestmark = pytest.mark.anyio

DONE = MessageStop(StopReason.END_TURN, Usage())


class HoldingModel:
    """Streams many deltas without ever awaiting, and keeps a reference to every stream it
    returned, as SDK clients do: nothing but an explicit ``aclose`` runs their ``finally``."""

    def __init__(self, deltas: int = 200) -> None:
        self.deltas = deltas
        self.streams: list[AsyncIterator[StreamEvent]] = []
        self.closed = 0
        self.yielded = anyio.Event()

    def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        gen = self._events()
        self.streams.append(gen)
        return gen

    async def _events(self) -> AsyncIterator[StreamEvent]:
        try:
            for i in range(self.deltas):
                self.yielded.set()
                yield TextDelta(0, f"w{i} ")
            yield DONE
        finally:
            self.closed += 1


async def test_cancelling_the_run_closes_the_stream_at_once(tmp_path: Path) -> None:
    model = HoldingModel()
    async with agent_harness(tmp_path, model=model) as h:
        run = await h.start(h.agent, "go")
        blocked = anyio.Event()

        async def slow_consumer(event: object) -> None:
            if isinstance(event, TextDelta):
                blocked.set()
                await anyio.sleep_forever()  # the stream is suspended at its yield meanwhile

        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: h.execute(run.id, emit=slow_consumer))
            await blocked.wait()
            tg.cancel_scope.cancel()
        assert model.closed == 1
        saved = await h.store.get_run(h.tenant_id, run.id)
        assert saved.status is RunStatus.CANCELLED


async def test_leaving_harness_stream_early_closes_the_stream_at_once(tmp_path: Path) -> None:
    model = HoldingModel()  # more deltas than the event buffer holds: the producer blocks
    async with agent_harness(tmp_path, model=model) as h:
        run = await h.start(h.agent, "go")
        async with h.stream(run.id) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    break
        assert model.closed == 1


class Abandoning:
    """Gives up on the first model call once it has streamed, and answers itself."""

    name = "abandoning"

    def __init__(self, model: HoldingModel) -> None:
        self.model = model
        self.calls = 0

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        self.calls += 1
        if self.calls > 1:
            return await next(req)
        async with anyio.create_task_group() as tg:
            tg.start_soon(next, req)
            await self.model.yielded.wait()
            tg.cancel_scope.cancel()
        return ModelResponse(
            Message("assistant", (TextBlock("fallback answer"),)), StopReason.END_TURN, Usage()
        )


async def test_a_wrapper_abandoning_a_call_closes_its_stream_and_discards_it(
    tmp_path: Path,
) -> None:
    model = HoldingModel()
    events: list[object] = []

    async def consumer(event: object) -> None:
        events.append(event)
        if isinstance(event, TextDelta) and len(events) < 3:
            await anyio.sleep(0.5)  # still consuming when the wrapper gives up

    async with agent_harness(tmp_path, model=model, stack=[Abandoning(model)]) as h:
        run = await h.start(h.agent, "go")
        finished = await h.execute(run.id, emit=consumer)
    assert finished.status is RunStatus.COMPLETED
    assert model.closed == 1
    # The UI saw a delta of the abandoned attempt, then was told to drop it.
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("TextDelta") < kinds.index("AttemptDiscarded")
    assert kinds.index("AttemptDiscarded") < kinds.index("MessageCompleted")


# -- 3. a discarded attempt is visible ----------------------------------------------------------


class FlakyModel:
    """The first attempt streams part of an answer, then fails; later attempts succeed."""

    def __init__(self) -> None:
        self.attempts = 0

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.attempts += 1
        if self.attempts == 1:
            yield TextDelta(0, "A draft that ")
            yield TextDelta(0, "is never kept")
            raise ModelError("overloaded")
        yield TextDelta(0, "The final ")
        yield TextDelta(0, "answer.")
        yield DONE


class Retry:
    name = "retry"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        try:
            return await next(req)
        except ModelError:
            return await next(req)


def shown_text(events: list[object]) -> str:
    """What a UI following the events shows: deltas, cleared on AttemptDiscarded."""
    text = ""
    for event in events:
        if isinstance(event, AttemptDiscarded):
            text = ""
        elif isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, MessageCompleted):
            return text
    raise AssertionError("no MessageCompleted")


async def test_a_retry_after_streamed_text_announces_the_discarded_attempt(
    tmp_path: Path,
) -> None:
    events: list[object] = []

    async def emit(event: object) -> None:
        events.append(event)

    async with agent_harness(tmp_path, model=FlakyModel(), stack=[Retry()]) as h:
        finished = await h.run(h.agent, "go", emit=emit)
        assert finished.status is RunStatus.COMPLETED
        saved = await h.store.load_messages(
            h.tenant_id, (await h.store.list_runs(h.tenant_id))[0].session_id
        )
    assert saved[-1].text == "The final answer."
    assert shown_text(events) == "The final answer."
    discarded = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert discarded == [AttemptDiscarded(1)]
    kinds = [type(e).__name__ for e in events]
    assert kinds[kinds.index("AttemptDiscarded") + 1] == "TextDelta"


async def test_no_discard_when_nothing_was_dropped(tmp_path: Path) -> None:
    events: list[object] = []

    async def emit(event: object) -> None:
        events.append(event)

    async with agent_harness(tmp_path, turns=[{"text": "Hello there."}], stack=[Retry()]) as h:
        await h.run(h.agent, "go", emit=emit)
    assert not any(isinstance(e, AttemptDiscarded) for e in events)


class RetryNoticeThenFail:
    """The first attempt says only that the provider is retrying, then fails for good."""

    def __init__(self) -> None:
        self.attempts = 0

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.attempts += 1
        if self.attempts == 1:
            yield ProviderRetry("anthropic", 529, 1, 2, 0.0, "overloaded")
            raise ModelError("overloaded")
        yield TextDelta(0, "Fine.")
        yield DONE


async def test_a_retry_notice_alone_is_nothing_to_discard(tmp_path: Path) -> None:
    events: list[object] = []

    async def emit(event: object) -> None:
        events.append(event)

    async with agent_harness(tmp_path, model=RetryNoticeThenFail(), stack=[Retry()]) as h:
        finished = await h.run(h.agent, "go", emit=emit)
    assert finished.status is RunStatus.COMPLETED
    assert not any(isinstance(e, AttemptDiscarded) for e in events)


# -- 5. an empty end_turn never makes the next request invalid --------------------------------


async def test_an_empty_end_turn_keeps_the_next_request_valid(tmp_path: Path) -> None:
    model = RecordingModel([{"stop_reason": "end_turn"}, {"text": "Here."}], strict=True)
    async with agent_harness(tmp_path, model=model) as h:
        first = await h.run(h.agent, "first question")
        assert first.status is RunStatus.COMPLETED
        session = (await h.store.get_run(h.tenant_id, first.run_id)).session_id
        second = await h.run(h.agent, "hello?", session_id=session)
        assert second.status is RunStatus.COMPLETED
        history = await h.store.load_messages(h.tenant_id, session)
    # The empty reply is kept as the record of what the model said, but never sent back.
    assert [(m.role, m.text) for m in history] == [
        ("user", "first question"),
        ("assistant", ""),
        ("user", "hello?"),
        ("assistant", "Here."),
    ]
    assert history_problems(history) != []  # sent as it is stored, a provider would refuse it
    assert [m.text for m in model.requests[1].messages] == ["first question", "hello?"]


# -- 6. a call cut off by max_tokens is never run ------------------------------------------------

pinged: list[dict[str, Any]] = []


@tool
def ping(host: str = "localhost") -> str:
    """Ping a host."""
    pinged.append({"host": host})
    return f"pong from {host}"


class CutOff:
    """Text, one whole call, then a call whose arguments never arrived: max_tokens."""

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        if len(request.messages) > 1:
            yield TextDelta(0, "Done.")
            yield DONE
            return
        yield TextDelta(0, "Pinging both.")
        yield ToolUseStart(1, "call_a", "ping")
        yield ToolUseStop(1)
        yield ToolUseStart(2, "call_b", "ping")
        yield MessageStop(StopReason.MAX_TOKENS, Usage())


async def test_a_call_cut_off_by_max_tokens_is_never_run(tmp_path: Path) -> None:
    pinged.clear()
    model = RecordingModel(CutOff(), strict=True)
    events: list[object] = []

    async def emit(event: object) -> None:
        events.append(event)

    # One at a time: events in call order (the test is about the cut-off call).
    async with agent_harness(tmp_path, model=model, tools=[ping], max_tool_concurrency=1) as h:
        finished = await h.run(h.agent, "ping twice", emit=emit)
    assert finished.status is RunStatus.COMPLETED
    assert pinged == [{"host": "localhost"}]  # call_a only; call_b's "{}" never was an input
    answer = model.requests[1].messages[-1]
    assert [r.tool_use_id for r in answer.tool_results] == ["call_a", "call_b"]
    cut = answer.tool_results[1]
    assert cut.is_error and "cut off by max_tokens" in cut.content
    started = [e.call.id for e in events if isinstance(e, ToolCallStarted)]
    done = [e.call.id for e in events if isinstance(e, ToolCallFinished)]
    assert started == done == ["call_a", "call_b"]


gate: dict[str, anyio.Event] = {}


@tool
async def wait() -> str:
    """Block until released."""
    gate["entered"].set()
    await gate["release"].wait()
    return "waited"


async def test_a_cut_off_call_is_not_run_on_resume_either(tmp_path: Path) -> None:
    pinged.clear()
    gate.update(entered=anyio.Event(), release=anyio.Event())
    turns = [
        {
            "tool_calls": [{"name": "wait"}, {"name": "ping", "input": {"host": "db"}}],
            "stop_reason": "max_tokens",
        },
        {"text": "Done."},
    ]
    async with agent_harness(tmp_path, turns=turns, tools=[wait, ping]) as h:
        run = await h.start(h.agent, "go")
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.execute, run.id)
            await gate["entered"].wait()
            tg.cancel_scope.cancel()
        gate["release"].set()
        finished = await h.execute(run.id)
        assert finished.status is RunStatus.COMPLETED
        history = await h.store.load_messages(h.tenant_id, run.session_id)
    assert pinged == []
    waited, cut = history[2].tool_results
    assert (waited.content, waited.is_error) == ("waited", False)
    assert cut.is_error and "cut off by max_tokens" in cut.content
    assert_valid_history(history)


# -- 7. a wrapper failing mid-batch loses no finished result ------------------------------------

steps: list[int] = []


@tool
def step(n: int) -> str:
    """Do step n."""
    steps.append(n)
    return f"did {n}"


class FailsOnTwo:
    name = "fails_on_two"
    armed = True

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        result = await next(req)
        if req.call.input["n"] == 2 and FailsOnTwo.armed:
            raise RuntimeError("wrapper broke")
        return result


@pytest.mark.parametrize("repair", [False, True], ids=["plain", "repair"])
async def test_a_wrapper_failing_mid_batch_keeps_the_finished_result(
    tmp_path: Path, repair: bool
) -> None:
    steps.clear()
    FailsOnTwo.armed = True
    batch = [{"name": "step", "input": {"n": n}} for n in (1, 2, 3)]
    model = RecordingModel([{"tool_calls": batch}, {"text": "done"}], strict=True)
    stack = [RepairToolCallsMiddleware(), FailsOnTwo()] if repair else [FailsOnTwo()]
    async with agent_harness(tmp_path, model=model, stack=stack, tools=[step]) as h:
        failed = await h.run(h.agent, "go")
        assert failed.status is RunStatus.FAILED
        assert failed.error == (
            "middleware 'fails_on_two' (an in-process object) raised RuntimeError in "
            "wrap_tool_call: wrapper broke"
        )
        FailsOnTwo.armed = False
        finished = await h.execute(failed.run_id)
        assert finished.status is RunStatus.COMPLETED
        history = await h.store.load_messages(
            h.tenant_id, (await h.store.get_run(h.tenant_id, failed.run_id)).session_id
        )
    assert steps.count(1) == 1, "the finished call ran again on resume"
    assert history[2].tool_results[0] == ToolResultBlock("toolu_scripted_0_0", "did 1")
    assert_valid_history(history)


# -- 16. no secret in an error result -----------------------------------------------------------


@tool
def call_api(path: str) -> str:
    """Call the billing API."""
    import os

    raise PermissionError(f"401 for {path} with key {os.environ['BILLING_API_KEY']}")


async def test_a_secret_quoted_by_an_error_result_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-9f8e7d6c5b4a"
    monkeypatch.setenv("BILLING_API_KEY", secret)
    model = RecordingModel(
        [{"tool_calls": [{"name": "call_api", "input": {"path": "/v1"}}]}, {"text": "ok"}],
        strict=True,
    )
    events: list[object] = []

    async def emit(event: object) -> None:
        events.append(event)

    async with agent_harness(tmp_path, model=model, tools=[call_api]) as h:
        finished = await h.run(h.agent, "bill", emit=emit)
        history = await h.store.load_messages(
            h.tenant_id, (await h.store.get_run(h.tenant_id, finished.run_id)).session_id
        )
    result = history[2].tool_results[0]
    assert result.is_error
    assert result.content == (
        "tool 'call_api' failed: PermissionError: 401 for /v1 with key [redacted BILLING_API_KEY]"
    )
    assert secret not in repr(model.requests[1])
    assert secret not in repr(events)
    assert isinstance(events[-1], RunFinished)


# -- 8. a message's role is user or assistant ---------------------------------------------------


@pytest.mark.parametrize("role", ["system", "tool", "User", ""])
def test_a_message_with_another_role_is_refused_when_made(role: str) -> None:
    with pytest.raises(ValueError, match=f"not {role!r}"):
        Message(role, (TextBlock("Be brief."),))  # type: ignore[arg-type]


# -- 14. deeply nested arguments fail the call, not the run -------------------------------------

took: list[object] = []


@tool
def take(data: dict[str, Any]) -> str:
    """Take the data."""
    took.append(data)
    return "took"


class DeepArguments:
    """Asks for ``take`` with arguments nested ``depth`` objects deep."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        if len(request.messages) > 1:
            yield TextDelta(0, "ok")
            yield DONE
            return
        nested = '{"a": ' * self.depth + "1" + "}" * self.depth
        yield ToolUseStart(0, "call_deep", "take")
        yield ToolInputDelta(0, '{"data": ' + nested + "}")
        yield ToolUseStop(0)
        yield MessageStop(StopReason.TOOL_USE, Usage())


@pytest.mark.parametrize(
    ("depth", "says"),
    [(700, "nest too deeply to be used"), (20_000, "are not a JSON object")],
)
async def test_deeply_nested_arguments_give_the_call_an_error_result(
    tmp_path: Path, depth: int, says: str
) -> None:
    took.clear()
    async with agent_harness(tmp_path, model=DeepArguments(depth), tools=[take]) as h:
        finished = await h.run(h.agent, "go")
        history = await h.store.load_messages(
            h.tenant_id, (await h.store.get_run(h.tenant_id, finished.run_id)).session_id
        )
    assert finished.status is RunStatus.COMPLETED, finished.error
    (result,) = history[2].tool_results
    assert result.is_error and says in result.content
    assert took == []


async def test_the_terminal_marks_a_discarded_attempt() -> None:
    import io

    from rich.console import Console

    from hango.cli.render import Renderer

    out = io.StringIO()
    renderer = Renderer(Console(file=out, width=100, emoji=False))
    for event in (
        TextDelta(0, "A draft"),
        AttemptDiscarded(1),
        TextDelta(0, "The answer."),
        MessageCompleted(
            Message("assistant", (TextBlock("The answer."),)), StopReason.END_TURN, Usage()
        ),
    ):
        await renderer.event(event)  # type: ignore[arg-type]
    assert out.getvalue() == "A draft\n(discarded: the model call was tried again)\nThe answer.\n"
