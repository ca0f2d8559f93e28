"""The middleware chain: onion order, system-block assembly by index, retry, short-circuit,
request rewrites that never reach history, scratch lifetime."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from hango import Harness, ModelResponse, Request, TextBlock, ToolResult, tool
from hango.agent.chain import Chain
from hango.agent.definition import AgentDefinition
from hango.agent.state import dump_state, load_state
from hango.middleware import ModelHandler, ModelRequest, State, ToolCallRequest, ToolHandler
from hango.provider.messages import Message, StopReason, ToolUseBlock, Usage
from hango.store import RunSave
from hango.store.sqlite import SqliteRunStore
from hango.testing import RecordingModel, new_state
from hango.tool import ToolRegistry, error_result

pytestmark = pytest.mark.anyio


class Recorder:
    """Model and tool wrapper that logs enter/exit into a shared trace."""

    def __init__(self, name: str, trace: list[str]) -> None:
        self.name = name
        self.trace = trace

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        self.trace.append(f"model>{self.name}")
        response = await next(req)
        self.trace.append(f"model<{self.name}")
        return response

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        self.trace.append(f"tool>{self.name}")
        result = await next(req)
        self.trace.append(f"tool<{self.name}")
        return result


def response(text: str = "ok") -> ModelResponse:
    return ModelResponse(Message("assistant", (TextBlock(text),)), StopReason.END_TURN, Usage())


async def test_index_zero_is_outermost_for_model_and_tool_calls() -> None:
    trace: list[str] = []
    chain = Chain.build([Recorder("a", trace), Recorder("b", trace), Recorder("c", trace)])
    state = new_state()

    async def model_base(req: ModelRequest) -> ModelResponse:
        trace.append("model:base")
        return response()

    async def tool_base(req: ToolCallRequest) -> ToolResult:
        trace.append("tool:base")
        return ToolResult("r")

    await chain.model_call(ModelRequest(Request("m", ()), state), model_base)
    await chain.tool_call(ToolCallRequest(ToolUseBlock("1", "t", {}), None, state), tool_base)
    assert trace == [
        "model>a", "model>b", "model>c", "model:base", "model<c", "model<b", "model<a",
        "tool>a", "tool>b", "tool>c", "tool:base", "tool<c", "tool<b", "tool<a",
    ]  # fmt: skip
    assert chain.names == ("a", "b", "c")


class Contributor:
    def __init__(self, name: str, *texts: str) -> None:
        self.name = name
        self.texts = texts

    def system_blocks(self, state: State) -> Sequence[TextBlock]:
        return [TextBlock(t) for t in self.texts]


class Plain:
    def __init__(self, name: str) -> None:
        self.name = name


class CacheBreakpoint:
    """Placeholder of the prompt-cache slot: marks the block at its ``system_ends`` index."""

    name = "prompt_cache"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        i = req.system_ends[self.name]
        system = list(req.request.system)
        system[i] = attrs.evolve(system[i], cache_control={"type": "ephemeral"})
        return await next(attrs.evolve(req, request=attrs.evolve(req.request, system=system)))


async def test_system_blocks_assembled_by_index_on_every_call() -> None:
    seen: list[tuple[TextBlock, ...]] = []
    ends_seen: list[dict[str, int]] = []
    todo = Contributor("todo", "PLAN")
    chain = Chain.build(
        [
            Contributor("skills", "SKILL A", "SKILL B"),
            Plain("repair_tool_calls"),
            todo,
            CacheBreakpoint(),
            Contributor("memory", "MEMORY"),
        ]
    )

    async def base(req: ModelRequest) -> ModelResponse:
        seen.append(req.request.system)
        ends_seen.append(dict(req.system_ends))
        return response()

    agent_blocks = (TextBlock("AGENT"),)
    state = new_state()
    await chain.model_call(ModelRequest(Request("m", (), system=agent_blocks), state), base)
    system = seen[0]
    assert [b.text for b in system] == ["AGENT", "SKILL A", "SKILL B", "PLAN", "MEMORY"]
    ends = ends_seen[0]
    assert ends == {
        "skills": 2, "repair_tool_calls": 2, "todo": 3, "prompt_cache": 3, "memory": 4,
    }  # fmt: skip
    breakpoint_index = ends["prompt_cache"]
    assert system[breakpoint_index].cache_control == {"type": "ephemeral"}
    assert [i for i, b in enumerate(system) if b.cache_control] == [3]
    assert ends["memory"] > breakpoint_index, "a later contributor lands after the breakpoint"

    # Assembled again on the next call, from current state.
    todo.texts = ("PLAN v2",)
    await chain.model_call(ModelRequest(Request("m", (), system=agent_blocks), state), base)
    assert seen[1][3].text == "PLAN v2"
    assert chain.system_blocks(agent_blocks, state)[3].text == "PLAN v2"


async def test_model_wrapper_retries_once() -> None:
    attempts: list[int] = []

    class RetryOnce:
        name = "retry"

        async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
            try:
                return await next(req)
            except RuntimeError:
                return await next(req)

    async def flaky(req: ModelRequest) -> ModelResponse:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("overloaded")
        return response("second try")

    chain = Chain.build([RetryOnce()])
    out = await chain.model_call(ModelRequest(Request("m", ()), new_state()), flaky)
    assert out.message.text == "second try"
    assert len(attempts) == 2


async def test_tool_wrapper_short_circuits() -> None:
    ran: list[str] = []

    class Cache:
        name = "cache"

        async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
            return ToolResult("cached")

    async def base(req: ToolCallRequest) -> ToolResult:
        ran.append(req.call.name)
        return ToolResult("fresh")

    trace: list[str] = []
    chain = Chain.build([Recorder("outer", trace), Cache(), Recorder("inner", trace)])
    req = ToolCallRequest(ToolUseBlock("1", "t", {}), None, new_state())
    assert (await chain.tool_call(req, base)).content == "cached"
    assert ran == [] and trace == ["tool>outer", "tool<outer"]


async def test_tool_exception_becomes_error_result_inside_innermost_handler() -> None:
    seen: list[ToolResult] = []

    class Observer:
        name = "observer"

        async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
            result = await next(req)
            seen.append(result)
            return result

    async def base(req: ToolCallRequest) -> ToolResult:
        raise KeyError("missing thing")

    chain = Chain.build([Observer()])
    req = ToolCallRequest(ToolUseBlock("1", "t", {}), None, new_state())
    result = await chain.tool_call(req, base)
    assert seen == [result]
    assert result.is_error and "KeyError" in result.content and "missing thing" in result.content
    # The exception rides along for wrappers (tool retry), outside equality and the repr.
    assert isinstance(result.exception, KeyError)
    assert result == ToolResult(result.content, is_error=True) and "KeyError(" not in repr(result)


async def test_cancellation_is_not_swallowed_by_the_tool_guard() -> None:
    import anyio

    async def base(req: ToolCallRequest) -> ToolResult:
        await anyio.sleep(10)
        return ToolResult("never")

    chain = Chain.build([])
    req = ToolCallRequest(ToolUseBlock("1", "t", {}), None, new_state())
    with anyio.move_on_after(0.01) as scope:
        await chain.tool_call(req, base)
        pytest.fail("cancellation must propagate")
    assert scope.cancelled_caught


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def test_request_rewrite_is_absent_from_saved_history(tmp_path: Path) -> None:
    class Rewriter:
        name = "rewriter"

        async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
            hint = Message.user("SECRET HINT")
            request = attrs.evolve(req.request, messages=(*req.request.messages, hint))
            return await next(attrs.evolve(req, request=request))

        async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
            call = attrs.evolve(req.call, input={"key": "rewritten"})
            return await next(attrs.evolve(req, call=call))

    model = RecordingModel(
        [{"tool_calls": [{"name": "lookup", "input": {"key": "original"}}]}, {"text": "done"}]
    )
    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'h.db'}") as store:
        harness = Harness(
            store, model=model, stack=lambda _: [Rewriter()], tools=ToolRegistry([lookup])
        )
        agent = AgentDefinition(name="t", model="scripted:inline")
        finished = await harness.run(agent, "go")
        assert finished.error is None
        run = await store.get_run(harness.tenant_id, finished.run_id)
        history = await store.load_messages(harness.tenant_id, run.session_id)
    assert model.requests[0].messages[-1].text == "SECRET HINT"
    assert all("SECRET HINT" not in m.text for m in history)
    assert history[1].tool_uses[0].input == {"key": "original"}
    assert history[2].tool_results[0].content == "value of rewritten"


async def test_scratch_is_empty_at_every_batch_start_and_never_persisted(tmp_path: Path) -> None:
    at_batch_start: list[dict[str, Any]] = []
    state_docs: list[dict[str, Any]] = []

    class ScratchUser:
        name = "scratch_user"

        async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
            if "calls" not in req.state.scratch:
                at_batch_start.append(dict(req.state.scratch))
            req.state.scratch.setdefault("calls", []).append(req.call.id)
            return await next(req)

    model = RecordingModel(
        [
            {"tool_calls": [{"name": "lookup", "input": {"key": "a"}}] * 2},
            {"tool_calls": [{"name": "lookup", "input": {"key": "b"}}]},
            {"text": "done"},
        ]
    )
    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'h.db'}") as store:
        original_save = store.save_run

        async def spy(save: RunSave) -> int:
            # The runner's saver hands the document over encoded.
            doc = save.state
            state_docs.append(json.loads(doc) if isinstance(doc, str) else doc)
            return await original_save(save)

        store.save_run = spy  # type: ignore[method-assign]
        harness = Harness(
            store, model=model, stack=lambda _: [ScratchUser()], tools=ToolRegistry([lookup])
        )
        finished = await harness.run(AgentDefinition(name="t", model="scripted:inline"), "go")
        assert finished.error is None
    assert at_batch_start == [{}, {}]
    assert state_docs and all("scratch" not in json.dumps(doc) for doc in state_docs)
    assert all(set(doc) == set(dump_state(new_state())) for doc in state_docs)


async def test_unknown_tool_runs_through_the_chain_with_tool_none() -> None:
    seen: list[ToolCallRequest] = []

    class Observer:
        name = "observer"

        async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
            seen.append(req)
            return await next(req)

    async def base(req: ToolCallRequest) -> ToolResult:
        return (
            error_result("unknown tool %r", req.call.name) if req.tool is None else ToolResult("")
        )

    chain = Chain.build([Observer()])
    result = await chain.tool_call(
        ToolCallRequest(ToolUseBlock("1", "ghost", {}), None, new_state()), base
    )
    assert seen[0].tool is None and result.content == "unknown tool 'ghost'"


def test_duplicate_middleware_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="repeated: a"):
        Chain.build([Plain("a"), Plain("b"), Plain("a")])


def test_state_dump_load_round_trip_through_json_text() -> None:
    state = new_state()
    state.private["x"] = {"n": 1}
    again = load_state(json.loads(json.dumps(dump_state(state))))
    assert (again.run_id, again.private) == (state.run_id, {"x": {"n": 1}})
