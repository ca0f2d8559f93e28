"""A middleware that breaks the contract is named: what it raised or returned, from which
capability, and where it came from (issue "Run integrity", item 2)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from hango import (
    MiddlewareError,
    ModelError,
    ModelResponse,
    Request,
    RunStatus,
    TextBlock,
    ToolResult,
    tool,
)
from hango.agent.chain import Chain
from hango.middleware import (
    ModelHandler,
    ModelRequest,
    State,
    ToolCallRequest,
    ToolHandler,
    load_private,
    store_private,
)
from hango.provider.messages import Message, StopReason, ToolUseBlock, Usage
from hango.testing import agent_harness, new_state

pytestmark = pytest.mark.anyio

RESPONSE = ModelResponse(Message("assistant", (TextBlock("hi"),)), StopReason.END_TURN, Usage())
ORIGINS = {"forgetful": "distribution hango-forgetful 1.2.3"}


class Pass:
    """A well-behaved wrapper that counts its calls in the run's private state."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _count(self, state: State) -> None:
        seen, _ = load_private(state, self.name, int, int)
        store_private(state, self.name, seen + 1)

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        self._count(req.state)
        return await next(req)

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        self._count(req.state)
        return await next(req)


class Forgetful:
    """Calls ``next`` and forgets to return its result (the classic bug)."""

    name = "forgetful"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        await next(req)
        return None  # type: ignore[return-value]

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        return {"content": "not a ToolResult"}  # type: ignore[return-value]


class NoAwait:
    name = "no_await"

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        return next(req)  # type: ignore[return-value]


class Raises:
    """Raises ValueError from whichever capability ``where`` names."""

    def __init__(self, where: str) -> None:
        self.name = "raiser"
        self.where = where

    def _maybe(self, capability: str) -> None:
        if capability == self.where:
            raise ValueError(f"bad config in {capability}")

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        response = await next(req)
        self._maybe("wrap_model_call")
        return response

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        self._maybe("wrap_tool_call")
        return await next(req)

    async def before_run(self, state: State) -> None:
        self._maybe("before_run")

    def provide_tools(self, state: State) -> Sequence[Any]:
        self._maybe("provide_tools")
        return ()

    def system_blocks(self, state: State) -> Sequence[TextBlock]:
        self._maybe("system_blocks")
        return ()


model_calls = 0


async def base_model(req: ModelRequest) -> ModelResponse:
    global model_calls
    model_calls += 1
    return RESPONSE


tool_calls = 0


async def base_tool(req: ToolCallRequest) -> ToolResult:
    global tool_calls
    tool_calls += 1
    return ToolResult("ran")


def model_req(state: State) -> ModelRequest:
    return ModelRequest(Request(model="m", messages=(Message.user("hi"),)), state)


def tool_req(state: State) -> ToolCallRequest:
    return ToolCallRequest(ToolUseBlock("t1", "echo", {}), None, state)


async def test_a_wrapper_returning_none_is_named_among_healthy_ones() -> None:
    global model_calls
    model_calls = 0
    chain = Chain.build([Pass("outer"), Forgetful(), Pass("inner")], origins=ORIGINS)
    state = new_state()
    with pytest.raises(MiddlewareError) as caught:
        await chain.model_call(model_req(state), base_model)
    err = caught.value
    assert (err.middleware, err.origin, err.capability) == (
        "forgetful",
        "distribution hango-forgetful 1.2.3",
        "wrap_model_call",
    )
    assert str(err) == (
        "middleware 'forgetful' (distribution hango-forgetful 1.2.3) returned None from "
        "wrap_model_call instead of a ModelResponse"
    )
    # Finding it never called the model again, and left no trace in the state: each healthy
    # wrapper counted the one real call once.
    assert model_calls == 1
    assert state.private == {"outer": 1, "inner": 1}


async def test_a_tool_wrapper_returning_a_dict_is_named() -> None:
    global tool_calls
    tool_calls = 0
    chain = Chain.build([Pass("a"), Forgetful(), Pass("b")])
    with pytest.raises(MiddlewareError, match=r"^middleware 'forgetful' returned \{'content'"):
        await chain.tool_call(tool_req(new_state()), base_tool)
    assert tool_calls == 0  # it short-circuited, and the search did not run the tool either


async def test_a_forgotten_await_is_named_and_the_coroutine_closed() -> None:
    # pytest turns "coroutine ... was never awaited" into an error: none may be left behind.
    chain = Chain.build([Pass("a"), NoAwait(), Pass("b")])
    with pytest.raises(MiddlewareError, match="middleware 'no_await' returned <coroutine"):
        await chain.tool_call(tool_req(new_state()), base_tool)


async def test_two_instances_of_one_class_are_told_apart() -> None:
    class Once(Pass):
        """Returns None on its second call, the way a conditional bug does."""

        async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
            result = await next(req)
            return None if self.name == "second" else result  # type: ignore[return-value]

    chain = Chain.build([Once("first"), Once("second"), Once("third")])
    with pytest.raises(MiddlewareError, match=r"^middleware 'second' returned None"):
        await chain.tool_call(tool_req(new_state()), base_tool)


@pytest.mark.parametrize(
    "capability",
    ["wrap_model_call", "wrap_tool_call", "before_run", "provide_tools", "system_blocks"],
)
async def test_a_middleware_raising_from_any_capability_is_named(capability: str) -> None:
    chain = Chain.build([Pass("a"), Raises(capability), Pass("b")], origins={"raiser": "here"})
    state = new_state()
    with pytest.raises(MiddlewareError) as caught:
        if capability == "before_run":
            await chain.before_run(state)
        elif capability == "provide_tools":
            chain.tools(state)
        elif capability == "wrap_tool_call":
            await chain.tool_call(tool_req(state), base_tool)
        else:  # system_blocks are assembled on every model call
            await chain.model_call(model_req(state), base_model)
    assert str(caught.value) == (
        f"middleware 'raiser' (here) raised ValueError in {capability}: bad config in {capability}"
    )
    assert isinstance(caught.value.__cause__, ValueError)


async def test_what_the_model_raises_passes_through_unchanged() -> None:
    chain = Chain.build([Pass("a"), Pass("b")])

    async def failing(req: ModelRequest) -> ModelResponse:
        raise RuntimeError("connection reset")

    async def refused(req: ModelRequest) -> ModelResponse:
        raise ModelError("429 rate limited")

    with pytest.raises(RuntimeError, match="connection reset"):
        await chain.model_call(model_req(new_state()), failing)
    with pytest.raises(ModelError, match="429"):
        await chain.model_call(model_req(new_state()), refused)


async def test_a_provider_or_contributor_returning_the_wrong_thing_is_named() -> None:
    class BadProvider:
        name = "bad_provider"

        def provide_tools(self, state: State) -> Sequence[Any]:
            return ["echo"]

    class BadContributor:
        name = "bad_contributor"

        def system_blocks(self, state: State) -> Sequence[Any]:
            return ["be brief"]

    with pytest.raises(MiddlewareError, match=r"'bad_provider' provided 'echo' \(str\)"):
        Chain.build([BadProvider()]).tools(new_state())
    with pytest.raises(MiddlewareError, match=r"'bad_contributor' returned 'be brief' \(str\)"):
        await Chain.build([BadContributor()]).model_call(model_req(new_state()), base_model)


def test_an_unknown_state_scope_is_refused_at_build() -> None:
    class Odd:
        name = "odd"
        state_scope = "forever"

    with pytest.raises(MiddlewareError, match="'odd' declares state_scope = 'forever'"):
        Chain.build([Odd()])


@tool
def echo(text: str) -> str:
    """Echo."""
    return text


async def test_the_run_fails_naming_the_middleware_not_with_an_attribute_error(
    tmp_path: Path,
) -> None:
    turns = [{"tool_calls": [{"name": "echo", "input": {"text": "x"}}]}, {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Forgetful()], tools=[echo]) as h:
        finished = await h.run(h.agent, "go")
        assert finished.status is RunStatus.FAILED
        assert finished.error == (
            "middleware 'forgetful' (an in-process object) returned None from wrap_model_call "
            "instead of a ModelResponse"
        )
        saved = await h.store.get_run(h.tenant_id, finished.run_id)
        assert saved.status is RunStatus.FAILED and saved.error == finished.error
