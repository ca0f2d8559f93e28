"""hango-limits: the plugin and its options table, each behaviour on reaching a limit through
the real loop and a SQLite store, the history an ``end`` leaves for the next message, and
counters that survive a SIGKILL and a resume without double-counting or forgetting."""

from __future__ import annotations

import json
import re
import signal
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span

import hango_limits
from hango import (
    AgentDefinition,
    ConfigError,
    Decision,
    RunFinished,
    RunStatus,
    ToolResult,
    telemetry,
    tool,
)
from hango.discovery import check_options
from hango.middleware import StackConfig, ToolCallRequest, ToolHandler
from hango.plugins import make_plugin_manager
from hango.store.sqlite import SqliteRunStore
from hango.testing import (
    HangoCli,
    RecordingModel,
    TestHarness,
    ToolBox,
    agent_harness,
    assert_installed,
    assert_valid_history,
    kill_when,
)
from hango.testing import saved_history as history
from hango_limits import LimitPolicy, LimitsMiddleware

box = ToolBox()
executed = box.executed


@box.tool
def search(q: str) -> str:
    """Search for q."""
    return f"found {q}"


@box.tool
def note(text: str) -> str:
    """Write a note."""
    return f"noted {text}"


def limits(**options: Any) -> LimitsMiddleware:
    return LimitsMiddleware(LimitPolicy.from_options(options))


def only(finished: RunFinished) -> str:
    (action,) = finished.pending
    return action.tool_call_id


def calls(*specs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": i} for n, i in specs]}


async def private(h: TestHarness, run_id: uuid.UUID) -> dict[str, Any]:
    record = await h.store.get_run(h.tenant_id, run_id)
    value: dict[str, Any] = record.state["private"]["limits"]
    return value


# -- the plugin and its options --------------------------------------------------------------


def test_installed_through_entry_point() -> None:
    config = StackConfig(middleware_options={"limits": {"run": {"model_calls": 4}}})
    placed = assert_installed(
        "limits", "hango-limits", hango_limits, middleware="limits", config=config
    )
    assert placed.capabilities == ("model_wrapper", "tool_wrapper", "run_hook")
    assert isinstance(placed.middleware, LimitsMiddleware)
    assert [lim.key for lim in placed.middleware.policy.limits] == ["run.model_calls"]


def test_a_valid_table_is_accepted_and_read() -> None:
    table = {
        "on_limit": "error",
        "on_tool_limit": "end",
        "run": {"model_calls": 10, "output_tokens": 5000, "per_tool": {"search": 2}},
        "session": {"tool_calls": 50, "model_calls": 20, "input_tokens": 100_000},
    }
    check_options({"limits": table}, make_plugin_manager(env={}), source="agent 'a'")
    policy = LimitPolicy.from_options(table)
    assert [(lim.key, lim.maximum) for lim in policy.limits] == [
        ("run.model_calls", 10),
        ("run.output_tokens", 5000),
        ("run.per_tool.search", 2),
        ("session.model_calls", 20),
        ("session.input_tokens", 100_000),
        ("session.tool_calls", 50),
    ]
    assert (policy.on_limit, policy.on_tool_limit) == ("error", "end")
    assert [lim.describe() for lim in policy.limits][2] == "2 calls of tool 'search' per run"


@pytest.mark.parametrize(
    ("table", "field", "says"),
    [
        ({"run": {"model_calls": 0}}, "[options.limits].run.model_calls", "less than the minimum"),
        ({"run": {"tool_calls": "5"}}, "[options.limits].run.tool_calls", "not of type"),
        ({"session": {"per_tool": {"q": -1}}}, "[options.limits].session.per_tool.q", "minimum"),
        ({"run": {"modelcalls": 3}}, "[options.limits].run", "modelcalls"),
        ({"on_limit": "continue"}, "[options.limits].on_limit", "'continue' is not one of"),
        ({"on_limit": "suspend"}, "[options.limits].on_limit", "'suspend' is not one of"),
        ({"on_tool_limit": "stop"}, "[options.limits].on_tool_limit", "'stop' is not one of"),
    ],
)
def test_an_invalid_table_names_the_field(table: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_options({"limits": table}, make_plugin_manager(env={}), source="agent 'a'")
    message = str(caught.value)
    assert message.startswith(f"agent 'a': {field}") and says in message
    assert "hango-limits" in message


def test_environment_defaults_are_overridden_by_the_agent_file() -> None:
    settings = {
        "HANGO_LIMITS_RUN_MODEL_CALLS": "5",
        "HANGO_LIMITS_SESSION_TOOL_CALLS": "30",
        "HANGO_LIMITS_ON_TOOL_LIMIT": "error",
    }
    config = StackConfig(
        settings=settings,
        middleware_options={"limits": {"run": {"model_calls": 7}, "on_tool_limit": "end"}},
    )
    policy = hango_limits.hango_middleware(config=config).policy
    assert [(lim.key, lim.maximum) for lim in policy.limits] == [
        ("run.model_calls", 7),
        ("session.tool_calls", 30),
    ]
    assert policy.on_tool_limit == "end"
    alone = hango_limits.hango_middleware(config=StackConfig(settings=settings)).policy
    assert [lim.maximum for lim in alone.limits] == [5, 30] and alone.on_tool_limit == "error"


@pytest.mark.parametrize(
    ("name", "value"),
    [("HANGO_LIMITS_RUN_OUTPUT_TOKENS", "lots"), ("HANGO_LIMITS_ON_LIMIT", "continue")],
)
def test_an_invalid_environment_default_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"^{name} must be"):
        hango_limits.hango_middleware(config=StackConfig(settings={name: value}))


def test_the_readme_agent_file_sets_its_limits(tmp_path: Path) -> None:
    readme = Path(__file__).resolve().parents[3] / "README.md"
    blocks = re.findall(r"^```toml\n(.*?)^```", readme.read_text(encoding="utf-8"), re.S | re.M)
    (text,) = [b for b in blocks if "[options.limits]" in b]
    (tmp_path / "reviewer.toml").write_text(text, encoding="utf-8")
    agent = AgentDefinition.from_file(tmp_path / "reviewer.toml")
    check_options(agent.options, make_plugin_manager(env={}), source="README")
    config = StackConfig(middleware_options=agent.options)
    policy = hango_limits.hango_middleware(config=config).policy
    assert [lim.describe() for lim in policy.limits] == [
        "30 model calls per run",
        "20 calls of tool 'search' per run",
    ]
    assert (policy.on_limit, policy.on_tool_limit) == ("end", "end")


# -- a concurrent batch ----------------------------------------------------------------------

in_flight = {"now": 0, "most": 0}


@box.tool
async def fetch(q: str) -> str:
    """Fetch q; slow enough that a batch's calls overlap."""
    in_flight["now"] += 1
    in_flight["most"] = max(in_flight["most"], in_flight["now"])
    await anyio.sleep(0.05)
    in_flight["now"] -= 1
    return f"fetched {q}"


@pytest.mark.anyio
async def test_a_budget_is_exact_when_the_batch_runs_at_once(tmp_path: Path) -> None:
    """Five calls of one response start before any finishes; with a budget of three tool
    calls, three run (at once) and two are refused: the running calls count."""
    executed.clear()
    in_flight.update(now=0, most=0)
    batch = calls(*(("fetch", {"q": q}) for q in "abcde"))
    mw = limits(run={"tool_calls": 3})
    async with agent_harness(
        tmp_path, turns=[batch, {"text": "ok"}], stack=[mw], tools=[fetch]
    ) as h:
        finished = await h.run(h.agent, "go")
        messages = await history(h, finished.run_id)
        counts = await private(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    assert executed == ["fetch a", "fetch b", "fetch c"]
    assert in_flight["most"] == 3  # they did overlap
    results = messages[2].tool_results
    assert [r.is_error for r in results] == [False, False, False, True, True]
    assert "limit of 3 tool calls per run" in results[3].content
    assert counts["run"]["tool_calls"] == 3 and counts["running"] == {}


# -- continue ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_continue_blocks_only_the_call_over_a_per_tool_limit(tmp_path: Path) -> None:
    executed.clear()
    turns = [
        calls(("search", {"q": "a"}), ("search", {"q": "b"})),
        calls(("search", {"q": "c"}), ("note", {"text": "x"})),
        {"text": "Done."},
    ]
    mw = limits(run={"per_tool": {"search": 2}})
    async with agent_harness(tmp_path, turns=turns, stack=[mw], tools=[search, note]) as h:
        finished = await h.run(h.agent, "go")
        messages = await history(h, finished.run_id)
        counts = await private(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    assert executed == ["search a", "search b", "note x"]
    blocked = messages[4].tool_results[0]
    assert blocked.is_error
    assert blocked.content == (
        "Not executed: the limit of 2 calls of tool 'search' per run was reached. "
        "Do not call 'search' again; answer with what you have."
    )
    assert messages[-1].text == "Done."
    # Blocked calls are not counted: they did not run.
    assert counts["run"]["tool_calls"] == 3
    assert counts["run"]["per_tool"] == {"search": 2, "note": 1}


@pytest.mark.anyio
async def test_continue_on_a_total_tool_limit_tells_the_model_to_stop_calling_tools(
    tmp_path: Path,
    recording_span: Callable[[], AbstractContextManager[Span]],
    exporter: InMemorySpanExporter,
) -> None:
    executed.clear()
    turns = [calls(("note", {"text": "1"}), ("search", {"q": "2"}), ("note", {"text": "3"}))]
    turns.append({"text": "Done."})
    async with agent_harness(
        tmp_path, turns=turns, stack=[limits(run={"tool_calls": 2})], tools=[search, note]
    ) as h:
        with recording_span():
            finished = await h.run(h.agent, "go")
        messages = await history(h, finished.run_id)
    assert executed == ["note 1", "search 2"]
    assert "limit of 2 tool calls per run" in messages[2].tool_results[2].content
    assert "Do not call any more tools" in messages[2].tool_results[2].content
    events = [
        dict(e.attributes or {})
        for s in exporter.get_finished_spans()
        for e in s.events
        if e.name == telemetry.SHORT_CIRCUITED
    ]
    assert events == [
        {
            telemetry.MIDDLEWARE_NAME: "limits",
            telemetry.REASON: "limit reached",
            hango_limits.LIMIT_ATTRIBUTE: "run.tool_calls",
            telemetry.TOOL_NAME: "note",
        }
    ]


# -- end ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_end_answers_the_whole_batch_and_leaves_a_history_the_next_message_can_use(
    tmp_path: Path,
) -> None:
    """langchain#34159: a limit reached mid-batch must not leave tool_use blocks unanswered."""
    executed.clear()
    turns = [
        calls(("note", {"text": "1"}), ("search", {"q": "a"}), ("note", {"text": "2"})),
        calls(("search", {"q": "b"}), ("note", {"text": "3"}), ("search", {"q": "c"})),
        {"text": "never: the run ended"},
        calls(("search", {"q": "d"})),
        {"text": "Second answer."},
    ]
    model = RecordingModel(turns)
    mw = limits(on_tool_limit="end", run={"per_tool": {"search": 1}})
    async with agent_harness(tmp_path, model=model, stack=[mw], tools=[search, note]) as h:
        first = await h.run(h.agent, "first")
        messages = await history(h, first.run_id)
        counts = await private(h, first.run_id)
        assert first.status is RunStatus.COMPLETED and first.error is None
        # The second batch: search b is over the limit; note 3 and search c are not run.
        assert executed == ["note 1", "search a", "note 2"]
        results = messages[4].tool_results
        assert [r.is_error for r in results] == [True, True, True]
        assert all("limit of 1 call of tool 'search' per run" in r.content for r in results)
        assert all("the run is ending" in r.content for r in results)
        final = messages[-1]
        assert final.role == "assistant"
        assert final.text == (
            "I stopped here: the limit of 1 call of tool 'search' per run was reached."
        )
        assert len(model.requests) == 2  # the final message was not asked of the model
        assert counts["ending"] is None
        assert_valid_history(messages)

        record = await h.store.get_run(h.tenant_id, first.run_id)
        second = await h.run(h.agent, "and now?", session_id=record.session_id)
    assert second.status is RunStatus.COMPLETED
    # The next message of the session saw a valid history, and a new run counts from zero.
    assert_valid_history(model.requests[2].messages)
    assert executed[-1] == "search d"


@pytest.mark.anyio
async def test_end_on_a_model_call_limit_answers_without_the_model(tmp_path: Path) -> None:
    executed.clear()
    model = RecordingModel([calls(("note", {"text": str(i)})) for i in range(5)])
    async with agent_harness(
        tmp_path, model=model, stack=[limits(run={"model_calls": 2})], tools=[note]
    ) as h:
        finished = await h.run(h.agent, "go")
        messages = await history(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    assert len(model.requests) == 2 and executed == ["note 0", "note 1"]
    assert messages[-1].text == "I stopped here: the limit of 2 model calls per run was reached."
    assert_valid_history(messages)


# -- error ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_error_fails_the_run_naming_the_limit(tmp_path: Path) -> None:
    model = RecordingModel([calls(("note", {"text": str(i)})) for i in range(5)])
    mw = limits(on_limit="error", run={"model_calls": 3})
    async with agent_harness(tmp_path, model=model, stack=[mw], tools=[note]) as h:
        finished = await h.run(h.agent, "go")
        record = await h.store.get_run(h.tenant_id, finished.run_id)
    assert finished.status is RunStatus.FAILED and record.status is RunStatus.FAILED
    assert finished.error == (
        "middleware 'limits' (an in-process object) raised LimitReached in wrap_model_call: "
        "limit reached: 3 model calls per run ([options.limits] run.model_calls)"
    )
    assert len(model.requests) == 3


@pytest.mark.anyio
async def test_error_on_a_tool_limit_fails_before_the_call_runs(tmp_path: Path) -> None:
    executed.clear()
    turns = [calls(("search", {"q": "a"})), calls(("search", {"q": "b"})), {"text": "no"}]
    mw = limits(on_tool_limit="error", session={"per_tool": {"search": 1}})
    async with agent_harness(tmp_path, turns=turns, stack=[mw], tools=[search]) as h:
        finished = await h.run(h.agent, "go")
    assert finished.status is RunStatus.FAILED
    assert finished.error is not None and "1 call of tool 'search' per session" in finished.error
    assert "session.per_tool.search" in finished.error
    assert executed == ["search a"]


# -- suspend ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_suspend_waits_for_a_person_to_raise_the_limit(tmp_path: Path) -> None:
    executed.clear()
    turns = [
        calls(("search", {"q": "a"})),
        calls(("search", {"q": "b"}), ("search", {"q": "c"})),
        calls(("search", {"q": "d"})),
        {"text": "Done."},
    ]
    mw = limits(on_tool_limit="suspend", run={"per_tool": {"search": 1}})
    async with agent_harness(tmp_path, turns=turns, stack=[mw], tools=[search]) as h:
        first = await h.run(h.agent, "go")
        assert first.status is RunStatus.SUSPENDED and executed == ["search a"]
        # Both calls of the batch are asked about in one round.
        b, c = first.pending
        assert (b.tool_call_id, c.tool_call_id) == ("toolu_scripted_1_0", "toolu_scripted_1_1")
        assert (b.middleware, b.name, b.decisions) == (
            "limits",
            "raise run.per_tool.search",
            ("approve", "reject"),
        )
        assert b.reason == (
            "the limit of 1 call of tool 'search' per run was reached; approve to raise it to "
            "2 and run this call, reject to refuse the call"
        )
        assert b.request == {
            "limits": [{"limit": "run.per_tool.search", "maximum": 1, "raise_to": 2}]
        }
        second = await h.resume(
            first.run_id, {b.tool_call_id: Decision.approve(), c.tool_call_id: Decision.reject()}
        )
        # The raised limit (2) holds for the rest of the run: search d asks again.
        assert second.status is RunStatus.SUSPENDED and executed == ["search a", "search b"]
        (d,) = second.pending
        assert d.reason.startswith("the limit of 2 calls of tool 'search' per run was reached")
        third = await h.resume(first.run_id, {d.tool_call_id: Decision.reject("Enough.")})
        messages = await history(h, first.run_id)
        counts = await private(h, first.run_id)
    assert third.status is RunStatus.COMPLETED and executed == ["search a", "search b"]
    assert [(r.content, r.is_error) for r in messages[4].tool_results] == [
        ("found b", False),
        (
            "Not executed: the limit of 2 calls of tool 'search' per run was reached and a "
            "person declined to raise it. Do not call 'search' again; answer with what you "
            "have.",
            True,
        ),
    ]
    assert "declined to raise it (Enough.)" in messages[6].tool_results[0].content
    assert counts["raised"] == {"run.per_tool.search": 1}
    assert counts["run"]["per_tool"] == {"search": 2}
    assert_valid_history(messages)


# -- tokens and sessions ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_output_tokens_cap_max_tokens_then_end_the_run(tmp_path: Path) -> None:
    usage = {"input_tokens": 10, "output_tokens": 70, "cache_read_input_tokens": 5}
    turns = [
        {**calls(("note", {"text": "1"})), "usage": usage},
        {**calls(("note", {"text": "2"})), "usage": {**usage, "output_tokens": 30}},
        {"text": "never"},
    ]
    model = RecordingModel(turns)
    async with agent_harness(
        tmp_path, model=model, stack=[limits(run={"output_tokens": 100})], tools=[note]
    ) as h:
        finished = await h.run(h.agent, "go")
        messages = await history(h, finished.run_id)
        counts = await private(h, finished.run_id)
    assert [r.max_tokens for r in model.requests] == [100, 30]
    assert messages[-1].text.endswith("the limit of 100 output tokens per run was reached.")
    assert counts["run"]["input_tokens"] == 30 and counts["run"]["output_tokens"] == 100


@pytest.mark.anyio
async def test_a_session_limit_counts_the_earlier_runs_of_the_session(tmp_path: Path) -> None:
    executed.clear()
    turns = [
        calls(("note", {"text": "1"})),
        {"text": "First answer."},
        calls(("note", {"text": "2"})),
        {"text": "never"},
    ]
    model = RecordingModel(turns)
    mw = limits(session={"model_calls": 3}, run={"model_calls": 10})
    async with agent_harness(tmp_path, model=model, stack=[mw], tools=[note]) as h:
        first = await h.run(h.agent, "one")
        record = await h.store.get_run(h.tenant_id, first.run_id)
        second = await h.run(h.agent, "two", session_id=record.session_id)
        messages = await history(h, second.run_id)
        counts = await private(h, second.run_id)
    assert first.status is second.status is RunStatus.COMPLETED
    assert len(model.requests) == 3 and executed == ["note 1", "note 2"]
    assert messages[-1].text.endswith("the limit of 3 model calls per session was reached.")
    assert counts["run"]["model_calls"] == 1 and counts["session"]["model_calls"] == 3


@pytest.mark.anyio
async def test_a_session_begun_without_limits_counts_its_history(tmp_path: Path) -> None:
    """The earlier runs left no counters (the plugin was not in their stack): the session's
    counts start from the model and tool calls in its history."""
    executed.clear()
    turns = [
        calls(("note", {"text": "1"})),
        {"text": "First answer."},
        calls(("note", {"text": "2"})),
        {"text": "never"},
    ]
    async with agent_harness(tmp_path, turns=turns, tools=[note]) as h:
        first = await h.run(h.agent, "one")
        session_id = (await h.store.get_run(h.tenant_id, first.run_id)).session_id
    mw = limits(session={"model_calls": 3, "tool_calls": 2})
    async with agent_harness(tmp_path, turns=turns, stack=[mw], tools=[note]) as h:
        second = await h.run(h.agent, "two", session_id=session_id)
        messages = await history(h, second.run_id)
        counts = await private(h, second.run_id)
    assert second.status is RunStatus.COMPLETED and executed == ["note 1", "note 2"]
    assert messages[-1].text.endswith("the limit of 3 model calls per session was reached.")
    assert counts["session"] == {
        "model_calls": 3,
        "input_tokens": 0,
        "output_tokens": 0,
        "tool_calls": 2,
        "per_tool": {"note": 2},
    }


@pytest.mark.anyio
async def test_session_tokens_and_raises_carry_to_the_sessions_next_run(tmp_path: Path) -> None:
    """The counters are session-scoped private state: the next run of the session starts from
    the session's tokens and the raise a person gave a session limit, while its run counters
    and the raise of a run limit start afresh."""
    executed.clear()
    turns = [
        {**calls(("search", {"q": "a"})), "usage": {"output_tokens": 30}},
        {**calls(("search", {"q": "b"})), "usage": {"output_tokens": 30}},
        {"text": "First answer.", "usage": {"output_tokens": 30}},
        {**calls(("search", {"q": "c"})), "usage": {"output_tokens": 5}},
        {"text": "Second answer.", "usage": {"output_tokens": 5}},
    ]
    model = RecordingModel(turns)
    mw = limits(
        on_tool_limit="suspend",
        session={"output_tokens": 100, "per_tool": {"search": 1}},
        run={"per_tool": {"search": 1}},
    )
    async with agent_harness(tmp_path, model=model, stack=[mw], tools=[search]) as h:
        first = await h.run(h.agent, "one")
        # search b reaches both search limits: one question raises both.
        (asked,) = first.pending
        assert asked.name == "raise run.per_tool.search, session.per_tool.search"
        assert asked.reason == (
            "the limits of 1 call of tool 'search' per run and 1 call of tool 'search' per "
            "session were reached; approve to raise them to 2 and 2 and run this call, reject "
            "to refuse the call"
        )
        first = await h.resume(first.run_id, {asked.tool_call_id: Decision.approve()})
        record = await h.store.get_run(h.tenant_id, first.run_id)
        second = await h.run(h.agent, "two", session_id=record.session_id)
        # The session limit, raised to 2, is reached again; the run limit (1) starts afresh.
        (asked,) = second.pending
        assert asked.request == {
            "limits": [{"limit": "session.per_tool.search", "maximum": 2, "raise_to": 3}]
        }
        second = await h.resume(second.run_id, {asked.tool_call_id: Decision.approve()})
        messages = await history(h, second.run_id)
        counts = await private(h, second.run_id)
    assert first.status is second.status is RunStatus.COMPLETED
    # 90 of the session's 100 output tokens were used by the first run: the second run's call
    # may write 10 at most, and after its 5 the session has 5 left.
    assert [r.max_tokens for r in model.requests] == [100, 70, 40, 10, 5]
    assert executed == ["search a", "search b", "search c"]
    assert messages[-1].text == "Second answer."
    assert counts["run_id"] == str(second.run_id)
    assert counts["session"]["output_tokens"] == 100 and counts["run"]["output_tokens"] == 10
    assert counts["session"]["per_tool"] == {"search": 3}
    assert counts["run"]["per_tool"] == {"search": 1}
    assert counts["raised"] == {"session.per_tool.search": 2}


# -- a cancel, a kill, and a resume ---------------------------------------------------------


class Gate:
    """A tool that waits for ``release`` the first time it runs."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()

    def tool(self) -> Any:
        @tool
        async def wait() -> str:
            """Wait for the gate."""
            executed.append("wait")
            self.entered.set()
            await self.release.wait()
            return "waited"

        return wait


@pytest.mark.anyio
async def test_a_call_cancelled_mid_run_is_counted_once_after_the_resume(tmp_path: Path) -> None:
    """The cancelled run is saved with its state at the cancel: a call counted when it starts
    would be counted again when it re-runs after the resume, and would block note b."""
    executed.clear()
    gate = Gate()
    turns = [
        calls(("note", {"text": "a"}), ("wait", {})),
        calls(("note", {"text": "b"})),
        calls(("note", {"text": "c"})),
        {"text": "Done."},
    ]
    mw = limits(run={"tool_calls": 3})
    # One at a time: note a has its result before wait starts (the test is about the resume).
    async with agent_harness(
        tmp_path, turns=turns, stack=[mw], tools=[note, gate.tool()], max_tool_concurrency=1
    ) as h:
        run = await h.start(h.agent, "go")
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(h.execute, run.id)
                await gate.entered.wait()
                scope.cancel()
        cancelled = await h.store.get_run(h.tenant_id, run.id)
        assert cancelled.status is RunStatus.CANCELLED
        assert (await private(h, run.id))["run"]["tool_calls"] == 1
        gate.release.set()
        finished = await h.execute(run.id)
        messages = await history(h, run.id)
        counts = await private(h, run.id)
    assert finished.status is RunStatus.COMPLETED
    assert executed == ["note a", "wait", "wait", "note b"]
    assert "limit of 3 tool calls per run" in messages[-2].tool_results[0].content
    assert counts["run"]["tool_calls"] == 3


class CancelAt:
    """Outside the limits (as the repeat detector is): cancels the run as the call named
    ``name`` is about to go in."""

    name = "cancel_at"

    def __init__(self, tool_name: str, scope: anyio.CancelScope) -> None:
        self.tool_name = tool_name
        self.scope = scope

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        if req.call.name == self.tool_name and not self.scope.cancel_called:
            self.scope.cancel()
            await anyio.lowlevel.checkpoint()
        return await next(req)


@pytest.mark.anyio
async def test_an_end_under_way_survives_a_cancel_and_a_resume(tmp_path: Path) -> None:
    """Cancelled after the call that reached the limit was answered, before the rest of its
    batch: the resumed run still answers the rest with errors and ends."""
    executed.clear()
    turns = [
        calls(("search", {"q": "a"}), ("search", {"q": "b"}), ("note", {"text": "x"})),
        {"text": "never: the run ended"},
    ]
    mw = limits(on_tool_limit="end", run={"per_tool": {"search": 1}})
    scope = anyio.CancelScope()
    stack = [CancelAt("note", scope), mw]
    # One at a time: search a has its result when note's turn comes (the test is about the end).
    async with agent_harness(
        tmp_path, turns=turns, stack=stack, tools=[search, note], max_tool_concurrency=1
    ) as h:
        run = await h.start(h.agent, "go")
        with scope:
            await h.execute(run.id)
        assert scope.cancelled_caught
        assert (await h.store.get_run(h.tenant_id, run.id)).status is RunStatus.CANCELLED
        assert (await private(h, run.id))["ending"] == "1 call of tool 'search' per run"
        finished = await h.execute(run.id)
        messages = await history(h, run.id)
    assert finished.status is RunStatus.COMPLETED
    assert executed == ["search a"]
    assert [r.is_error for r in messages[2].tool_results] == [False, True, True]
    assert "the run is ending" in messages[2].tool_results[2].content
    assert messages[-1].text.startswith("I stopped here")
    assert_valid_history(messages)


# -- a kill and a resume --------------------------------------------------------------------


SLOW_TOOLS = '''
import pathlib, time
from hango import tool

HERE = pathlib.Path(__file__).parent

def log(text):
    with (HERE / "calls.log").open("a") as f:
        f.write(text + "\\n")

@tool
def note(text: str) -> str:
    """Write a note."""
    log(text)
    return f"noted {text}"

@tool
def slow(seconds: float) -> str:
    """Work for a while, unless told to hurry."""
    log("slow")
    while not (HERE / "fast").exists() and seconds > 0:
        time.sleep(0.05)
        seconds -= 0.05
    return "slept"
'''

#: Without history repair the resumed run finishes its interrupted batch itself.
NO_REPAIR = {"HANGO_DISABLE_PLUGINS": "repair"}

SCRIPT = """
[[turns]]
tool_calls = [
    { name = "note", input = { text = "a" } },
    { name = "slow", input = { seconds = 60 } },
    { name = "note", input = { text = "b" } },
]
[[turns]]
tool_calls = [{ name = "note", input = { text = "c" } }]
[[turns]]
text = "Finished."
"""

AGENT = """
name = "budgeted"
model = "scripted:script.toml"
tools = ["slow_tools:note", "slow_tools:slow"]
max_tool_concurrency = {concurrency}

[options.limits]
run = {{ model_calls = 3, tool_calls = 3 }}
"""


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_counters_survive_a_sigkill_and_a_resume(
    tmp_path: Path, agent_dir: Callable[..., Path], hango_cli: HangoCli
) -> None:
    """The run is killed while its second tool call runs. The first call's count was saved
    with its result; the killed call is counted once, when it runs again after the resume.
    Double-counting would block note b; forgetting would let note c run. One call at a time
    (the concurrent batch is the next test)."""
    agent_dir(agent=AGENT.format(concurrency=1), script=SCRIPT, tools={"slow_tools": SLOW_TOOLS})
    log = tmp_path / "calls.log"
    proc = hango_cli("run", "--agent", "agent.toml", "go", env=NO_REPAIR)
    await kill_when(proc, log, "slow", never="the slow tool never started")

    store = await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}")
    async with store:
        (run,) = await store.list_runs(uuid.UUID(int=0))
        killed = await store.get_run(uuid.UUID(int=0), run.id)
    assert killed.state["private"]["limits"]["run"]["tool_calls"] == 1
    (tmp_path / "fast").touch()
    resumed = hango_cli("resume", "--force", str(run.id), env=NO_REPAIR)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert "Finished." in out

    assert log.read_text().split() == ["a", "slow", "slow", "b"]
    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        done = await store.get_run(uuid.UUID(int=0), run.id)
        messages = await store.load_messages(uuid.UUID(int=0), done.session_id)
    assert done.status is RunStatus.COMPLETED
    results = [r for m in messages for r in m.tool_results]
    assert [r.content for r in results[:3]] == ["noted a", "slept", "noted b"]
    assert results[3].is_error and "limit of 3 tool calls per run" in results[3].content
    counts = done.state["private"]["limits"]["run"]
    assert (counts["model_calls"], counts["tool_calls"]) == (3, 3)
    assert json.dumps(counts["per_tool"], sort_keys=True) == '{"note": 2, "slow": 1}'


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_counters_of_a_concurrent_batch_survive_a_sigkill_and_a_resume(
    tmp_path: Path, agent_dir: Callable[..., Path], hango_cli: HangoCli
) -> None:
    """The batch runs at once: note a and note b complete (and are counted) while slow runs;
    the kill leaves slow as running. After the resume slow runs once more and is counted once:
    3 tool calls, so note c is refused."""
    agent_dir(agent=AGENT.format(concurrency=8), script=SCRIPT, tools={"slow_tools": SLOW_TOOLS})
    log = tmp_path / "calls.log"
    proc = hango_cli("run", "--agent", "agent.toml", "go", env=NO_REPAIR)
    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        # Killed once note b's result (and count) is saved, while slow still runs.
        for _ in range(400):
            assert proc.poll() is None, proc.communicate()
            runs = await store.list_runs(uuid.UUID(int=0))
            if runs and runs[0].state:
                counted = runs[0].state.get("private", {}).get("limits", {})
                if counted.get("run", {}).get("tool_calls") == 2:
                    break
            await anyio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        (run,) = await store.list_runs(uuid.UUID(int=0))
        killed = await store.get_run(uuid.UUID(int=0), run.id)
    limits = killed.state["private"]["limits"]
    assert limits["run"]["tool_calls"] == 2
    assert list(limits["running"].values()) == ["slow"]
    (tmp_path / "fast").touch()
    resumed = hango_cli("resume", "--force", str(run.id), env=NO_REPAIR)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert "Finished." in out

    assert sorted(log.read_text().split()) == ["a", "b", "slow", "slow"]
    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        done = await store.get_run(uuid.UUID(int=0), run.id)
        messages = await store.load_messages(uuid.UUID(int=0), done.session_id)
    results = [r for m in messages for r in m.tool_results]
    assert [r.content for r in results[:3]] == ["noted a", "slept", "noted b"]
    assert results[3].is_error and "limit of 3 tool calls per run" in results[3].content
    counts = done.state["private"]["limits"]
    assert (counts["run"]["model_calls"], counts["run"]["tool_calls"]) == (3, 3)
    assert counts["running"] == {}
