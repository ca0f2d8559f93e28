"""Runs in a test: a harness on a fresh SQLite file (``agent_harness``), a bare ``State`` for
calling a middleware directly (``new_state``), a model that keeps what it was sent and can hold
it to a strict provider's rules (``RecordingModel``), and a run killed in process and resumed
by a new harness, as after a ``kill -9`` (``kill_and_resume``)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from hango.agent.definition import AgentDefinition
from hango.agent.events import Event, RunFinished
from hango.agent.middleware import Middleware
from hango.agent.state import State
from hango.provider.errors import ModelError
from hango.provider.events import StreamEvent
from hango.provider.messages import Message, Request
from hango.provider.model import Model
from hango.provider.scripted import ScriptedModel
from hango.run.runner import Harness
from hango.store.base import RunRecord, RunStore
from hango.store.sqlite import SqliteRunStore
from hango.testing.history import history_problems
from hango.tool.base import Tool
from hango.tool.registry import ToolRegistry


class TestHarness(Harness):
    """A Harness with the ``agent`` it was made for."""

    __test__ = False  # not a pytest test class
    agent: AgentDefinition


@contextlib.asynccontextmanager
async def agent_harness(
    tmp_path: Path,
    *,
    turns: Sequence[Mapping[str, Any]] | None = None,
    model: Model | None = None,
    stack: Sequence[Middleware] = (),
    tools: Sequence[Tool] = (),
    tool_allowlist: Sequence[str] | None = None,
    max_turns: int = 10,
    settings: Mapping[str, str] | None = None,
    max_tool_concurrency: int = 8,
) -> AsyncIterator[TestHarness]:
    """A harness on a fresh SQLite file under ``tmp_path`` whose agent replays ``turns`` (or
    uses ``model``) with the given middlewares and tools. ``settings`` default to none (the
    process environment is not read); the store is closed on exit. ``max_tool_concurrency``
    is the agent's (1: the calls of a batch run one at a time, in call order).

    ::

        async with agent_harness(tmp_path, turns=[{"text": "hi"}], stack=[MyMiddleware()]) as h:
            finished = await h.run(h.agent, "hello")
    """
    store = await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}")
    if model is None:
        model = ScriptedModel.from_turns(list(turns or []))
    harness = TestHarness(
        store,
        model=model,
        stack=lambda _config: list(stack),
        tools=ToolRegistry(tools),
        settings=settings or {},
    )
    harness.agent = AgentDefinition(
        name="test",
        model="scripted:inline",
        tool_allowlist=None if tool_allowlist is None else tuple(tool_allowlist),
        max_turns=max_turns,
        max_tool_concurrency=max_tool_concurrency,
    )
    try:
        yield harness
    finally:
        await store.aclose()


def new_state(messages: Sequence[Message] = ()) -> State:
    """A ``State`` of new random tenant, session, run and agent ids holding ``messages``: what a
    middleware sees when a test calls one of its methods directly, outside a run. A list is
    used as it is (the state's ``messages`` is that list), any other sequence is copied."""
    held = messages if isinstance(messages, list) else list(messages)
    return State(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), messages=held)


class RecordingModel:
    """A model that keeps every request it was sent (``requests``) and answers with ``inner``:
    a ``Model``, or scripted turns (``ScriptedModel.from_turns``).

    ``strict=True`` holds every request to Anthropic's rules first (``history_problems``): a
    request a strict provider would refuse fails as it would, with a ``ModelError`` of status
    400 listing the problems, and the problems are kept in ``problems``. ``name`` is set as an
    attribute when given (some tests tell models apart by it)."""

    def __init__(
        self,
        inner: Model | Sequence[Mapping[str, Any]],
        *,
        strict: bool = False,
        name: str | None = None,
    ) -> None:
        self.inner: Model = (
            ScriptedModel.from_turns(list(inner)) if isinstance(inner, Sequence) else inner
        )
        self.strict = strict
        self.requests: list[Request] = []
        self.problems: list[str] = []
        if name is not None:
            self.name = name

    @property
    def native_output(self) -> bool:
        """The inner model's (see ``hango.agent.output.prefers_native``)."""
        return bool(getattr(self.inner, "native_output", False))

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if self.strict:
            problems = history_problems(request.messages)
            if problems:
                self.problems.extend(problems)
                raise ModelError(
                    "invalid_request_error: " + "; ".join(problems), status=400, transient=False
                )
        async for event in self.inner.stream(request):
            yield event


@frozen
class KilledRun:
    """What ``kill_and_resume`` saw: the started ``run``, its record as the kill left it
    (``killed``), how the resumed execute ended (``finished``) and the record after it."""

    run: RunRecord
    killed: RunRecord
    finished: RunFinished
    record: RunRecord


async def kill_and_resume(
    store: RunStore,
    harness: Callable[[RunStore], Harness],
    agent: AgentDefinition,
    prompt: str,
    *,
    killed_by: type[BaseException],
    emit: Callable[[Event], Awaitable[None]] | None = None,
    around_resume: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> KilledRun:
    """Start a run with ``harness(store)``, execute it until ``killed_by`` (a ``BaseException``
    a tool or model raises, as a ``kill -9`` would end the process: nothing after it is
    saved), then execute it again with a second ``harness(store)`` (new middlewares, as in a
    new process), inside ``around_resume()``. ``emit`` receives the first execute's events.

    Raises ``AssertionError`` when the first execute ends without ``killed_by``."""
    first = harness(store)
    run = await first.start(agent, prompt)
    try:
        if emit is None:
            await first.execute(run.id)
        else:
            await first.execute(run.id, emit=emit)
    except killed_by:
        pass
    else:
        raise AssertionError(f"the run ended without {killed_by.__name__}")
    killed = await store.get_run(first.tenant_id, run.id)
    with around_resume():
        finished = await harness(store).execute(run.id)
    record = await store.get_run(first.tenant_id, run.id)
    return KilledRun(run, killed, finished, record)


async def saved_history(harness: Harness, run_id: uuid.UUID) -> list[Message]:
    """The messages of the session of run ``run_id`` as the store holds them."""
    record = await harness.store.get_run(harness.tenant_id, run_id)
    return await harness.store.load_messages(harness.tenant_id, record.session_id)
