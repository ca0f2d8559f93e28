"""hango-repeat: call keys, blocking the Nth identical call, per-run counts that survive a
resume, the threshold setting, the plugin entry point."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span

import hango_repeat
from hango import (
    ConfigError,
    Harness,
    RunStatus,
    ScriptedModel,
    StateError,
    Tool,
    ToolResult,
    ToolUseBlock,
    telemetry,
    tool,
)
from hango.agent.state import dump_state, load_state
from hango.discovery import default_stack
from hango.middleware import StackConfig, State, ToolCallRequest, load_private
from hango.plugins import make_plugin_manager
from hango.testing import agent_harness, assert_installed, new_state
from hango_repeat import (
    RepeatCallMiddleware,
    RepeatCounts,
    call_key,
    canonical_json,
    fnv1a_64,
)


class Executions:
    """The innermost handler: counts the calls that reached it."""

    def __init__(self) -> None:
        self.calls: list[ToolUseBlock] = []

    async def __call__(self, req: ToolCallRequest) -> ToolResult:
        self.calls.append(req.call)
        return ToolResult("ran")


async def call(mw: RepeatCallMiddleware, state: State, name: str, args: Any, run: Executions):
    req = ToolCallRequest(ToolUseBlock(f"id{len(run.calls)}", name, args), None, state)
    return await mw.wrap_tool_call(req, run)


# -- the plugin ------------------------------------------------------------------------------


def test_installed_through_entry_point() -> None:
    placed = assert_installed("repeat", "hango-repeat", hango_repeat, middleware="repeat_call")
    assert isinstance(placed.middleware, RepeatCallMiddleware)
    assert placed.middleware.threshold == 3
    assert placed.capabilities == ("tool_wrapper",)


def test_removing_the_plugin_removes_only_its_slot() -> None:
    every = [m.name for m in default_stack(StackConfig(), make_plugin_manager(env={}))]
    pm = make_plugin_manager(env={"HANGO_DISABLE_PLUGINS": "repeat"})
    without = [m.name for m in default_stack(StackConfig(), pm)]
    assert "repeat_call" in every
    assert without == [n for n in every if n != "repeat_call"]


def test_threshold_comes_from_the_setting() -> None:
    config = StackConfig(settings={"HANGO_REPEAT_CALL_THRESHOLD": "5"})
    assert hango_repeat.hango_middleware(config=config).threshold == 5


@pytest.mark.parametrize("raw", ["three", "1", "0", "-2", "2.5"])
def test_invalid_threshold_fails_building_the_stack_naming_the_variable(raw: str) -> None:
    config = StackConfig(settings={"HANGO_REPEAT_CALL_THRESHOLD": raw})
    with pytest.raises(ConfigError, match="HANGO_REPEAT_CALL_THRESHOLD"):
        default_stack(config, make_plugin_manager(env={}))


@pytest.mark.anyio
async def test_invalid_threshold_fails_at_startup_before_a_run_is_recorded(
    tmp_path: Path,
) -> None:
    """Through the Harness, which builds the stack from the installed plugins."""
    async with agent_harness(tmp_path) as h:
        harness = Harness(
            h.store,
            model=ScriptedModel.from_turns([{"text": "hi"}]),
            settings={"HANGO_REPEAT_CALL_THRESHOLD": "often"},
        )
        with pytest.raises(ConfigError, match="HANGO_REPEAT_CALL_THRESHOLD must be an integer"):
            await harness.run(h.agent, "hello")
        assert await h.store.list_runs(h.tenant_id) == []


# -- keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xCBF29CE484222325),
        (b"a", 0xAF63DC4C8601EC8C),
        (b"foobar", 0x85944171F73967E8),
        (b"hello world", 0x779A65E7023CD2E7),
    ],
)
def test_fnv1a_64_matches_the_published_vectors(data: bytes, expected: int) -> None:
    assert fnv1a_64(data) == expected


def test_canonical_json_sorts_keys_and_drops_whitespace() -> None:
    assert canonical_json({"b": 2, "a": {"d": [1, 2], "c": None}}) == (
        '{"a":{"c":null,"d":[1,2]},"b":2}'
    )
    assert canonical_json({"q": "grüße"}) == '{"q":"grüße"}'


def test_call_key_is_fnv_of_name_and_canonical_arguments() -> None:
    assert call_key("f", {"b": 2, "a": 1}) == call_key("f", {"a": 1, "b": 2})
    expected = fnv1a_64(b'f{"a":1,"b":2}')
    assert call_key("f", {"a": 1, "b": 2}) == format(expected, "016x")
    assert call_key("f", {"a": 1}) != call_key("g", {"a": 1})
    assert call_key("f", {"a": 1}) != call_key("f", {"a": 2})
    assert call_key("f", {"a": 1}) != call_key("f", {"a": 1, "b": None})


# -- blocking --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_third_identical_call_is_blocked_and_not_executed() -> None:
    mw, state, run = RepeatCallMiddleware(), new_state(), Executions()
    assert not (await call(mw, state, "search", {"pattern": "TODO", "path": "."}, run)).is_error
    assert not (await call(mw, state, "search", {"path": ".", "pattern": "TODO"}, run)).is_error
    blocked = await call(mw, state, "search", {"pattern": "TODO", "path": "."}, run)
    assert blocked.is_error
    assert blocked.content == (
        "Not executed: this exact call was already made 2 times in this run (search, same "
        "arguments). Use the earlier result or change your approach."
    )
    assert len(run.calls) == 2
    # Other calls are unaffected, and later repeats stay blocked.
    assert not (await call(mw, state, "search", {"pattern": "FIXME", "path": "."}, run)).is_error
    assert (await call(mw, state, "search", {"pattern": "TODO", "path": "."}, run)).is_error
    assert len(run.calls) == 3


@pytest.mark.anyio
async def test_threshold_two_blocks_the_second_call() -> None:
    mw, state, run = RepeatCallMiddleware(2), new_state(), Executions()
    await call(mw, state, "f", {}, run)
    blocked = await call(mw, state, "f", {}, run)
    assert "already made once" in blocked.content
    assert len(run.calls) == 1


def test_threshold_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        RepeatCallMiddleware(1)


@pytest.mark.anyio
async def test_non_object_arguments_are_counted_too() -> None:
    mw, state, run = RepeatCallMiddleware(2), new_state(), Executions()
    await call(mw, state, "f", '{"broken', run)
    assert (await call(mw, state, "f", '{"broken', run)).is_error


@pytest.mark.anyio
async def test_counts_are_private_state_and_survive_the_state_document() -> None:
    mw, state, run = RepeatCallMiddleware(), new_state(), Executions()
    await call(mw, state, "f", {"x": 1}, run)
    await call(mw, state, "f", {"x": 1}, run)
    counts, found = load_private(state, "repeat_call", RepeatCounts)
    assert found
    assert counts == RepeatCounts({call_key("f", {"x": 1}): 2})
    resumed = load_state(dump_state(state))
    assert (await call(mw, resumed, "f", {"x": 1}, run)).is_error
    assert len(run.calls) == 2


@pytest.mark.anyio
async def test_many_distinct_calls_load_the_counts_once_and_never_change_a_stored_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loads: list[str] = []
    real = hango_repeat.middleware.load_private

    def counted(state: State, name: str, cls: Any, default: Any = None) -> Any:
        loads.append(name)
        return real(state, name, cls, default)

    monkeypatch.setattr(hango_repeat.middleware, "load_private", counted)
    mw, state, run = RepeatCallMiddleware(), new_state(), Executions()
    stored = []
    for i in range(200):
        await call(mw, state, "f", {"i": i}, run)
        stored.append(state.private["repeat_call"])
    # Loaded (converted) once, for the first call; every later call read the counts it wrote.
    assert loads == ["repeat_call"]
    # Copy on count: each value, once stored, stays as it was (a checkpoint may hold it).
    sizes = [len(v["counts"]) + len(v.get("settled", {})) for v in stored]  # type: ignore[union-attr]
    assert sizes == list(range(1, 201))
    # The big part is replaced only when the small one is folded into it: a checkpoint
    # re-encodes the small one in between (at most FOLD_AT keys here).
    bigs = {id(v.get("settled")) for v in stored}  # type: ignore[union-attr]
    assert len(bigs) <= 200 // hango_repeat.middleware.FOLD_AT + 1
    assert all(len(v["counts"]) <= hango_repeat.middleware.FOLD_AT for v in stored)  # type: ignore[index]
    # A value another writer put there (a resumed state, an undone call) is loaded again.
    state.private["repeat_call"] = dict(state.private["repeat_call"])  # type: ignore[arg-type]
    assert (await call(mw, state, "f", {"i": 0}, run)).is_error is False
    assert (await call(mw, state, "f", {"i": 0}, run)).is_error
    assert loads == ["repeat_call", "repeat_call"]
    assert load_private(state, "repeat_call", RepeatCounts)[0].of(call_key("f", {"i": 0})) == 3


class Interrupted(BaseException):
    """Stands for the cancellation that is the only thing the innermost handler lets through."""


@pytest.mark.anyio
async def test_a_call_cut_short_is_not_counted() -> None:
    mw, state, run = RepeatCallMiddleware(2), new_state(), Executions()

    async def cut_short(req: ToolCallRequest) -> ToolResult:
        raise Interrupted

    req = ToolCallRequest(ToolUseBlock("x", "wait", {}), None, state)
    with pytest.raises(Interrupted):
        await mw.wrap_tool_call(req, cut_short)
    # Called again after a resume: it runs.
    assert not (await call(mw, state, "wait", {}, run)).is_error
    assert (await call(mw, state, "wait", {}, run)).is_error


@pytest.mark.anyio
async def test_malformed_counts_are_an_error_naming_the_middleware() -> None:
    state = new_state()
    state.private["repeat_call"] = {"counts": {"abc": "many"}}
    with pytest.raises(StateError) as info:
        await call(RepeatCallMiddleware(), state, "f", {}, Executions())
    assert info.value.middleware == "repeat_call"
    assert "counts" in info.value.path


@pytest.mark.anyio
async def test_blocked_call_records_the_span_event(
    recording_span: Callable[[], AbstractContextManager[Span]], exporter: InMemorySpanExporter
) -> None:
    mw, state, run = RepeatCallMiddleware(2), new_state(), Executions()
    with recording_span():
        await call(mw, state, "read_file", {"path": "secret.txt"}, run)
        await call(mw, state, "read_file", {"path": "secret.txt"}, run)
    (span,) = exporter.get_finished_spans()
    (event,) = [e for e in span.events if e.name == telemetry.REPEAT_CALL_BLOCKED]
    assert dict(event.attributes or {}) == {
        telemetry.MIDDLEWARE_NAME: "repeat_call",
        telemetry.TOOL_NAME: "read_file",
    }


# -- through the loop: a resumed run keeps counting -------------------------------------------

executed: list[str] = []


@tool
def lookup(term: str) -> str:
    """Look a term up.

    Args:
        term: what to look up.
    """
    executed.append(term)
    return f"{term}: found"


class LookupTools:
    name = "test_tools"

    def provide_tools(self, state: State) -> tuple[Tool, ...]:
        return (lookup,)


@pytest.mark.anyio
async def test_a_resumed_run_keeps_counting(tmp_path: Path) -> None:
    executed.clear()
    same = {"name": "lookup", "input": {"term": "vent"}}
    first_part = [{"tool_calls": [same]}, {"tool_calls": [same]}]
    stack = [LookupTools(), RepeatCallMiddleware()]
    async with agent_harness(tmp_path, turns=first_part, stack=stack) as h:
        # The script runs out after two calls: the run fails, its state saved.
        stopped = await h.run(h.agent, "look it up")
        assert stopped.status is RunStatus.FAILED
        h.model = ScriptedModel.from_turns([*first_part, {"tool_calls": [same]}, {"text": "ok"}])
        resumed = await h.execute(stopped.run_id)
        record = await h.store.get_run(h.tenant_id, stopped.run_id)
        messages = await h.store.load_messages(h.tenant_id, record.session_id)
    assert resumed.status is RunStatus.COMPLETED
    assert executed == ["vent", "vent"]
    (blocked,) = messages[6].tool_results
    assert blocked.is_error and "already made 2 times" in blocked.content
    counts = load_state(record.state).private["repeat_call"]
    assert counts == {"counts": {call_key("lookup", {"term": "vent"}): 3}}
