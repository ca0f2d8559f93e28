"""hango-mcp in real runs against the real test server (``servers/mcp_server.py``) over stdio
and streamable HTTP: one session reused across runs, results shown once, crashes, hangs, HTTP
errors, restarts, list changes, cancellation, approval."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from hango import ConfigError, Decision, RunStatus
from hango.testing import RecordingModel, agent_harness
from hango.testing import saved_history as history
from hango_approval import HumanInTheLoopMiddleware
from hango_mcp import McpMiddleware, McpWarning, ServerConfig, servers

pytestmark = pytest.mark.anyio


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def call(*tools: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": i} for n, i in tools]}


def done(text: str = "done") -> dict[str, Any]:
    return {"text": text}


async def results(h: Any, run_id: Any) -> list[tuple[str, bool]]:
    return [(r.content, r.is_error) for m in await history(h, run_id) for r in m.tool_results]


async def test_a_stdio_servers_tools_run_and_one_session_serves_every_run(
    tmp_path: Path, stdio_server: Any, call_log: Path
) -> None:
    # langchain-mcp-adapters#207: a session per call lost a stateful server's state.
    mw = McpMiddleware([stdio_server()])
    turns = [call(("t_count", {}), ("t_echo", {"text": "hi"})), done()]
    model = RecordingModel(turns)
    async with agent_harness(tmp_path, model=model, stack=[mw]) as h:
        first = await h.run(h.agent, "count")
        second = await h.run(h.agent, "again")
        assert await results(h, first.run_id) == [("1", False), ("hi", False)]
        # The same server process: its counter goes on.
        assert await results(h, second.run_id) == [("2", False), ("hi", False)]
    assert first.status is RunStatus.COMPLETED and second.status is RunStatus.COMPLETED
    shown = [t.name for t in model.requests[0].tools]
    assert {"t_echo", "t_count", "t_forecast"} <= set(shown)
    assert calls(call_log) == ["count 1", "echo hi", "count 2", "echo hi"]


async def test_structured_content_is_shown_once_images_as_placeholders_errors_as_errors(
    tmp_path: Path, stdio_server: Any
) -> None:
    # agent-framework#7866: every result reached the model twice.
    turns = [call(("t_forecast", {"city": "Oslo"}), ("t_picture", {}), ("t_fail", {})), done()]
    async with agent_harness(tmp_path, turns=turns, stack=[McpMiddleware([stdio_server()])]) as h:
        finished = await h.run(h.agent, "weather")
        got = await results(h, finished.run_id)
    (forecast, forecast_error), (picture, _), (failed, failed_error) = got
    assert forecast.count("Oslo") == 1 and "21.5" in forecast and not forecast_error
    assert picture.startswith("a caption\n\n[image image/png, about ")
    assert failed_error and failed == "Error executing tool fail"


async def test_a_server_that_exits_mid_call_fails_that_call_and_restarts_for_the_next(
    tmp_path: Path, stdio_server: Any, call_log: Path
) -> None:
    turns = [call(("t_count", {})), call(("t_crash", {})), call(("t_count", {})), done()]
    async with agent_harness(tmp_path, turns=turns, stack=[McpMiddleware([stdio_server()])]) as h:
        finished = await h.run(h.agent, "crash")
        got = await results(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    (counted, _), (crashed, is_error), (after, _) = got
    assert is_error and "MCP server 't' closed the connection during the call" in crashed
    assert (counted, after) == ("1", "1")  # a new process: its counter starts again
    assert calls(call_log) == ["count 1", "crash", "count 1"]  # nothing ran twice


async def test_a_server_that_died_while_idle_is_started_again_before_the_call(
    tmp_path: Path, stdio_server: Any, call_log: Path
) -> None:
    # strands harness-sdk#4403: a stdio server dead after the handshake hung the agent.
    config = stdio_server()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    crash = [call(("t_crash", {})), done()]
    async with agent_harness(tmp_path / "a", turns=crash, stack=[McpMiddleware([config])]) as h:
        await h.run(h.agent, "crash it")
    echo = [call(("t_echo", {"text": "back"})), done()]
    async with agent_harness(tmp_path / "b", turns=echo, stack=[McpMiddleware([config])]) as h:
        again = await h.run(h.agent, "and again")
        assert await results(h, again.run_id) == [("back", False)]
    assert calls(call_log) == ["crash", "echo back"]


async def test_a_hung_server_times_out_and_is_replaced(
    tmp_path: Path, stdio_server: Any, call_log: Path
) -> None:
    turns = [call(("t_hang", {})), call(("t_echo", {"text": "alive"})), done()]
    mw = McpMiddleware([stdio_server(timeout=2)])
    async with agent_harness(tmp_path, turns=turns, stack=[mw]) as h:
        start = time.monotonic()
        finished = await h.run(h.agent, "hang")
        got = await results(h, finished.run_id)
    assert time.monotonic() - start < 30
    (hung, is_error), (echoed, _) = got
    assert is_error and "did not answer tool 'hang' within timeout = 2 s" in hung
    assert echoed == "alive"
    assert calls(call_log) == ["hang", "echo alive"]


async def test_a_cancelled_run_cancels_the_call_on_the_server(
    tmp_path: Path, stdio_server: Any, call_log: Path
) -> None:
    turns = [call(("t_slow", {"seconds": 30})), done()]
    async with agent_harness(tmp_path, turns=turns, stack=[McpMiddleware([stdio_server()])]) as h:
        run = await h.start(h.agent, "wait")
        with anyio.move_on_after(20) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(h.execute, run.id)
                while "slow start 30.0" not in calls(call_log):  # noqa: ASYNC110 - a file
                    await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
    deadline = time.monotonic() + 10
    while "slow cancelled" not in calls(call_log):
        assert time.monotonic() < deadline, calls(call_log)
        await anyio.sleep(0.05)
    assert "slow done" not in calls(call_log)


async def test_a_changed_tool_list_reaches_the_next_turn_and_a_dropped_tool_says_so(
    tmp_path: Path, stdio_server: Any, call_log: Path
) -> None:
    turns = [
        call(("t_grow", {})),
        call(("t_extra", {})),
        call(("t_shrink", {})),
        call(("t_extra", {})),
        done(),
    ]
    model = RecordingModel(turns)

    async def settle() -> None:
        await anyio.sleep(1.0)  # the list-changed event and the new listing

    class Settle:
        name = "settle"

        async def wrap_tool_call(self, req: Any, next: Any) -> Any:
            result = await next(req)
            if req.call.name in ("t_grow", "t_shrink"):
                await settle()
            return result

    mw = McpMiddleware([stdio_server()])
    async with agent_harness(tmp_path, model=model, stack=[mw, Settle()]) as h:
        finished = await h.run(h.agent, "change")
        got = await results(h, finished.run_id)
    names = [{t.name for t in r.tools} for r in model.requests]
    assert "t_extra" not in names[0] and "t_extra" in names[1] and "t_extra" not in names[3]
    assert got[1] == ("extra ran", False)
    assert got[3][1] and "tool 't_extra' is no longer offered by MCP server 't'" in got[3][0]
    assert calls(call_log) == ["extra"]


async def test_the_tool_list_handed_out_is_a_copy(tmp_path: Path, stdio_server: Any) -> None:
    # pydantic-ai#7477: callers could change the cached list for everyone.
    mw = McpMiddleware([stdio_server()])
    async with agent_harness(tmp_path, turns=[done()], stack=[mw]) as h:
        await h.run(h.agent, "hi")
    from hango.testing import new_state

    state = new_state()
    first = mw.provide_tools(state)
    first[0].spec.input_schema["properties"].clear()
    list(first).clear()
    again = mw.provide_tools(state)
    assert again[0].spec.input_schema["properties"] and len(again) == len(first)
    assert state.private["mcp"]["tools"]["t_echo"] == "t"  # the names the run saw


async def test_an_unreachable_required_server_is_one_line_and_an_optional_one_a_warning(
    tmp_path: Path,
) -> None:
    missing = servers({"servers": {"gone": {"command": str(tmp_path / "no-such-server")}}})
    async with agent_harness(tmp_path, turns=[done()], stack=[McpMiddleware(missing)]) as h:
        failed = await h.run(h.agent, "hi")
    assert failed.status is RunStatus.FAILED
    text = str(failed.error)
    assert "\n" not in text and text.startswith("middleware 'mcp'")
    assert "MCP server 'gone' (" in text and "could not be reached: FileNotFoundError" in text
    optional = servers({"servers": {"gone": {"url": "http://127.0.0.1:9/mcp", "required": False}}})
    async with agent_harness(tmp_path, turns=[done()], stack=[McpMiddleware(optional)]) as h:
        with pytest.warns(McpWarning, match="MCP server 'gone'.*running without its tools"):
            finished = await h.run(h.agent, "hi")
    assert finished.status is RunStatus.COMPLETED


async def test_two_servers_offering_one_name_are_refused_naming_both(
    tmp_path: Path, stdio_table: dict[str, Any]
) -> None:
    with pytest.raises(ConfigError, match="servers 'a' and 'c' both show their tools with prefix"):
        servers({"servers": {"a": dict(stdio_table), "c": {**stdio_table, "prefix": "a"}}})
    # Different prefixes can still meet: server "plain" (no prefix) offers "t_echo" too.
    env = {**stdio_table["env"], "MCP_EXTRA_TOOL": "t_echo"}
    both = servers(
        {
            "servers": {
                "t": dict(stdio_table),
                "plain": {
                    **stdio_table,
                    "env": env,
                    "prefix": "",
                    "tools": {"include": ["t_echo"]},
                },
            }
        }
    )
    async with agent_harness(tmp_path, turns=[done()], stack=[McpMiddleware(both)]) as h:
        failed = await h.run(h.agent, "hi")
    assert failed.status is RunStatus.FAILED
    assert (
        "tool name 't_echo' is offered by server 't' (tool 'echo') and by server 'plain' "
        "(tool 't_echo')"
    ) in str(failed.error)


async def test_an_mcp_tool_is_gated_by_approval_like_any_tool(
    tmp_path: Path, stdio_server: Any, call_log: Path
) -> None:
    gate = HumanInTheLoopMiddleware({"t_count": True})
    turns = [call(("t_count", {})), done()]
    async with agent_harness(
        tmp_path, turns=turns, stack=[McpMiddleware([stdio_server()]), gate]
    ) as h:
        finished = await h.run(h.agent, "count")
        assert finished.status is RunStatus.SUSPENDED and calls(call_log) == []
        (action,) = finished.pending
        resumed = await h.resume(finished.run_id, {action.tool_call_id: Decision.approve()})
    assert resumed.status is RunStatus.COMPLETED
    assert calls(call_log) == ["count 1"]


async def test_an_http_server_errors_restarts_and_comes_back(
    tmp_path: Path, http_server: Any, call_log: Path
) -> None:
    # strands harness-sdk#1334 / fastmcp#499: a 4xx/5xx answer hung the agent;
    # adk-python#3321: a session was reused after the server restarted.
    config = servers({"servers": {"web": {"url": http_server.url, "timeout": 20}}})
    turns = [
        call(("web_count", {})),
        call(("web_count", {})),  # answered 500
        call(("web_count", {})),  # the server was restarted in between
        call(("web_count", {})),  # and restarted again, after a good call this time
        done(),
    ]

    class Faults:
        name = "faults"

        def __init__(self) -> None:
            self.n = 0

        async def wrap_tool_call(self, req: Any, next: Any) -> Any:
            self.n += 1
            if self.n == 2:
                await anyio.to_thread.run_sync(http_server.fail_with, 500)
            if self.n in (3, 4):
                await anyio.to_thread.run_sync(http_server.stop)
                await anyio.to_thread.run_sync(http_server.start)
            return await next(req)

    async with agent_harness(tmp_path, turns=turns, stack=[McpMiddleware(config), Faults()]) as h:
        finished = await h.run(h.agent, "count")
        got = await results(h, finished.run_id)
    (first, _), (failed, is_error), after, again = got
    assert first == "1"
    assert is_error and "MCP server 'web' answered with an error" in failed
    assert after == again == ("1", False)  # new server processes, answered at once


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_sessions_are_shared_across_event_loops_and_backends(
    tmp_path: Path, stdio_server: Any, anyio_backend: str
) -> None:
    config: ServerConfig = stdio_server()
    async with agent_harness(
        tmp_path, turns=[call(("t_count", {})), done()], stack=[McpMiddleware([config])]
    ) as h:
        first = await h.run(h.agent, "count on trio")
        assert await results(h, first.run_id) == [("1", False)]

    async def on_asyncio() -> list[tuple[str, bool]]:
        async with agent_harness(
            tmp_path / "b", turns=[call(("t_count", {})), done()], stack=[McpMiddleware([config])]
        ) as h2:
            run = await h2.run(h2.agent, "count on asyncio")
            return await results(h2, run.run_id)

    (tmp_path / "b").mkdir()
    got = await anyio.to_thread.run_sync(lambda: anyio.run(on_asyncio, backend="asyncio"))
    assert got == [("2", False)]


async def test_a_server_asking_for_input_gets_an_error_result_not_a_hang(
    tmp_path: Path, stdio_server: Any, call_log: Path
) -> None:
    # hango-mcp does not answer elicitation yet (docs/how-to/mcp.md): the call fails at once,
    # naming the server and the tool, and the session goes on serving.
    turns = [call(("t_ask", {})), call(("t_echo", {"text": "still here"})), done()]
    async with agent_harness(tmp_path, turns=turns, stack=[McpMiddleware([stdio_server()])]) as h:
        start = time.monotonic()
        finished = await h.run(h.agent, "ask me")
        got = await results(h, finished.run_id)
    assert time.monotonic() - start < 30
    (asked, is_error), echoed = got
    assert is_error and asked.startswith("MCP server 't', tool 'ask': ")
    assert echoed == ("still here", False)
    assert calls(call_log) == ["ask", "echo still here"]
