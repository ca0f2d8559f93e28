"""Hypothesis properties of the chain, the stack and the state document."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

import hango.middleware
from hango import ModelResponse, Request, TextBlock, ToolResult, tool
from hango.agent.chain import Chain
from hango.agent.loop import LoopSettings, run_loop
from hango.agent.stack import AGENT_SLOT, STACK_ORDER
from hango.agent.state import dump_state, load_state
from hango.discovery import default_stack
from hango.middleware import (
    ModelHandler,
    ModelRequest,
    StackConfig,
    State,
    Todo,
    ToolCallRequest,
    ToolHandler,
)
from hango.plugins import make_plugin_manager
from hango.provider.messages import Message, StopReason, ToolUseBlock, Usage
from hango.provider.scripted import ScriptedModel
from hango.testing import new_state
from hango.tool import ToolRegistry


class Spec:
    """A random middleware: which capabilities it has and how often its wrappers call next."""

    def __init__(self, name: str, caps: frozenset[str], calls: int, trace: list[str]) -> None:
        self.name = name
        self.caps = caps
        self.calls = calls
        self.trace = trace


def make_middleware(spec: Spec) -> object:
    """A class with exactly the capability methods ``spec.caps`` names."""
    ns: dict[str, Any] = {"name": spec.name}

    async def wrap_model_call(self: Any, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        spec.trace.append(">" + spec.name)
        out: ModelResponse | None = None
        for _ in range(spec.calls):
            out = await next(req)
        spec.trace.append("<" + spec.name)
        return out or RESPONSE

    async def wrap_tool_call(self: Any, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        spec.trace.append(">" + spec.name)
        out: ToolResult | None = None
        for _ in range(spec.calls):
            out = await next(req)
        spec.trace.append("<" + spec.name)
        return out or ToolResult("short-circuited")

    async def before_run(self: Any, state: State) -> None:
        spec.trace.append("hook:" + spec.name)

    def provide_tools(self: Any, state: State) -> Sequence[object]:
        @tool(name=f"{spec.name}_tool", description=f"tool of {spec.name}")
        def provided() -> str:
            return spec.name

        return [provided]

    def system_blocks(self: Any, state: State) -> Sequence[TextBlock]:
        return [TextBlock(f"{spec.name} block {i}") for i in range(len(spec.name) % 3 + 1)]

    methods = {
        "model": ("wrap_model_call", wrap_model_call),
        "tool": ("wrap_tool_call", wrap_tool_call),
        "hook": ("before_run", before_run),
        "provider": ("provide_tools", provide_tools),
        "contributor": ("system_blocks", system_blocks),
    }
    for cap in spec.caps:
        attr, fn = methods[cap]
        ns[attr] = fn
    return type(f"Mw_{spec.name}", (), ns)()


RESPONSE = ModelResponse(Message("assistant", (TextBlock("x"),)), StopReason.END_TURN, Usage())
CAPS = st.frozensets(st.sampled_from(["model", "tool", "hook", "provider", "contributor"]))


@st.composite
def stacks(draw: st.DrawFn, max_calls: int = 2) -> tuple[list[Spec], list[str]]:
    n = draw(st.integers(0, 7))
    trace: list[str] = []
    specs = [Spec(f"m{i}", draw(CAPS), draw(st.integers(0, max_calls)), trace) for i in range(n)]
    return specs, trace


def run(coro_fn: Any, *args: Any) -> Any:
    return anyio.run(coro_fn, *args)


@settings(max_examples=150, deadline=None)
@given(stacks(max_calls=1))
def test_enter_exit_trace_is_a_palindrome_in_chain_order(
    stack: tuple[list[Spec], list[str]],
) -> None:
    specs, trace = stack
    chain = Chain.build([make_middleware(s) for s in specs])  # type: ignore[misc]

    async def base(req: ModelRequest) -> ModelResponse:
        trace.append("base")
        return RESPONSE

    run(chain.model_call, ModelRequest(Request("m", ()), new_state()), base)
    names = [t[1:] for t in trace if t != "base"]
    assert names == names[::-1]
    enters = [t[1:] for t in trace if t.startswith(">")]
    wrappers = [s.name for s in specs if "model" in s.caps]
    # Entered in chain order, up to and including the first wrapper that short-circuits.
    cut = next(
        (i for i, s in enumerate(s for s in specs if "model" in s.caps) if s.calls == 0), None
    )
    assert enters == (wrappers if cut is None else wrappers[: cut + 1])


@settings(max_examples=150, deadline=None)
@given(stacks(max_calls=2))
def test_base_runs_exactly_as_often_as_the_wrappers_ask(
    stack: tuple[list[Spec], list[str]],
) -> None:
    specs, _ = stack
    chain = Chain.build([make_middleware(s) for s in specs])  # type: ignore[misc]
    counts = {"model": 0, "tool": 0}

    async def model_base(req: ModelRequest) -> ModelResponse:
        counts["model"] += 1
        return RESPONSE

    async def tool_base(req: ToolCallRequest) -> ToolResult:
        counts["tool"] += 1
        return ToolResult("ok")

    state = new_state()
    run(chain.model_call, ModelRequest(Request("m", ()), state), model_base)
    run(chain.tool_call, ToolCallRequest(ToolUseBlock("1", "t", {}), None, state), tool_base)
    assert counts["model"] == math.prod(s.calls for s in specs if "model" in s.caps)
    assert counts["tool"] == math.prod(s.calls for s in specs if "tool" in s.caps)


@tool
def registry_one() -> str:
    """First agent tool."""
    return "1"


@tool
def registry_two() -> str:
    """Second agent tool."""
    return "2"


@settings(max_examples=60, deadline=None)
@given(stacks(max_calls=1))
def test_tools_are_registry_then_providers_in_chain_order(
    stack: tuple[list[Spec], list[str]],
) -> None:
    specs, trace = stack
    for s in specs:
        s.calls = 1  # pass-through, so the request reaches the model
    chain = Chain.build([make_middleware(s) for s in specs])  # type: ignore[misc]
    seen: list[Request] = []

    class Model:
        async def stream(self, request: Request) -> Any:
            seen.append(request)
            async for e in ScriptedModel.from_turns([{"text": "done"}]).stream(request):
                yield e

    async def go() -> None:
        state = new_state()
        state.messages.append(Message.user("hi"))
        await chain.before_run(state)

        async def discard(_: object) -> None:
            return None

        await run_loop(
            state,
            chain=chain,
            model=Model(),
            view=ToolRegistry([registry_one, registry_two]).view(),
            settings=LoopSettings("m"),
            emit=discard,
            checkpoint=discard,
        )

    anyio.run(go)
    expected = ["registry_one", "registry_two"] + [
        f"{s.name}_tool" for s in specs if "provider" in s.caps
    ]
    assert [t.name for t in seen[0].tools] == expected
    assert [t for t in trace if t.startswith("hook:")] == [
        "hook:" + s.name for s in specs if "hook" in s.caps
    ]


@settings(max_examples=150, deadline=None)
@given(stacks())
def test_contributor_block_indexes_grow_with_chain_position(
    stack: tuple[list[Spec], list[str]],
) -> None:
    specs, _ = stack
    chain = Chain.build([make_middleware(s) for s in specs])  # type: ignore[misc]
    agent = (TextBlock("agent"),)
    blocks, ends = chain.system_layout(agent, new_state())
    order = [ends[s.name] for s in specs]
    assert order == sorted(order)
    assert blocks[0].text == "agent"
    previous = 0
    for s in specs:
        if "contributor" in s.caps:
            mine = [b.text for b in blocks[previous + 1 : ends[s.name] + 1]]
            assert mine and all(t.startswith(f"{s.name} block") for t in mine)
            previous = ends[s.name]
        else:
            assert ends[s.name] == previous


PINNED = [n for n in STACK_ORDER if n != AGENT_SLOT]
OWN_NAMES = ["audit_log", "shout", "trace_calls"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(PINNED), unique=True),
    st.permutations(OWN_NAMES).flatmap(lambda p: st.integers(0, 3).map(lambda k: p[:k])),
    st.randoms(use_true_random=False),
)
def test_shuffled_registration_gives_the_same_chain(
    names: list[str], listed: list[str], rnd: Any
) -> None:
    """Pinned slots by STACK_ORDER, the agent's own middlewares in the agent slot in the
    agent's order, whatever the order plugins register in; unlisted own names stay out."""

    def plugin(name: str) -> object:
        class P:
            @hango.middleware.hookimpl
            def hango_middleware(self, config: StackConfig) -> object:
                return type("Mw", (), {"name": name})()

        return P()

    def build(order: list[str]) -> list[str]:
        pm = make_plugin_manager(load_entrypoints=False)
        for name in order:
            pm.register(plugin(name), name=f"plugin-{name}")
        config = StackConfig(agent_middleware=tuple(listed))
        return [m.name for m in default_stack(config, pm)]

    registered = [*names, *OWN_NAMES]
    shuffled = list(registered)
    rnd.shuffle(shuffled)
    agent_at = STACK_ORDER.index(AGENT_SLOT)
    expected = [
        *(n for n in STACK_ORDER[:agent_at] if n in names),
        *listed,
        *(n for n in STACK_ORDER[agent_at + 1 :] if n in names),
    ]
    assert build(registered) == build(shuffled) == expected


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
TODOS = st.lists(
    st.builds(
        Todo,
        st.text(min_size=1, max_size=40),
        st.sampled_from(["pending", "in_progress", "completed"]),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(TODOS, st.dictionaries(st.sampled_from(STACK_ORDER), JSON_VALUES, max_size=5))
def test_dump_load_is_an_identity(todos: list[Todo], private: dict[str, Any]) -> None:
    state = new_state()
    state.todos = todos
    state.private = private
    again = load_state(json.loads(json.dumps(dump_state(state))))
    assert again.todos == todos
    assert again.private == private
    assert dump_state(again) == dump_state(state)
