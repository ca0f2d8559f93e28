"""hango-prompt-cache: where the breakpoints go and for which models, the cache-bust watch and
its per-run state across a kill and resume, the options table, the plugin entry point."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span

import hango_prompt_cache
from hango import (
    AgentDefinition,
    ConfigError,
    Harness,
    Message,
    ModelResponse,
    Request,
    RunStatus,
    ScriptedModel,
    StateError,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolRegistry,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
    telemetry,
)
from hango.agent.chain import Chain
from hango.agent.stack import STACK_ORDER
from hango.discovery import check_options
from hango.middleware import ModelRequest, StackConfig, State
from hango.plugins import make_plugin_manager
from hango.provider.messages import Block
from hango.store.sqlite import SqliteRunStore
from hango.testing import Killed, ToolBox, assert_installed, kill_and_resume, new_state
from hango_prompt_cache import (
    CACHE_BUST,
    EXPECTED_TOKENS,
    READ_TOKENS,
    TTLS,
    PromptCacheMiddleware,
    marker,
    place_breakpoints,
)

pytestmark = pytest.mark.anyio

FIVE = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


class Provider:
    """Stands for a model of a provider: only ``provider_name`` matters to the middleware."""

    def __init__(self, provider_name: str) -> None:
        self.provider_name = provider_name


ANTHROPIC, OPENAI = Provider("anthropic"), Provider("openai")


class Capture:
    """The innermost handler: keeps each request and answers with ``usages`` in turn."""

    def __init__(self, *usages: Usage) -> None:
        self.usages = list(usages) or [Usage()]
        self.requests: list[ModelRequest] = []

    async def __call__(self, req: ModelRequest) -> ModelResponse:
        usage = self.usages[min(len(self.requests), len(self.usages) - 1)]
        self.requests.append(req)
        return ModelResponse(Message("assistant", (TextBlock("ok"),)), StopReason.END_TURN, usage)


TOOLS = (ToolSpec("search", "Search.", {"type": "object"}), ToolSpec("read", "Read.", {}))
HISTORY = (
    Message.user("What are the open risks?"),
    Message("assistant", (TextBlock("Looking."), ToolUseBlock("t1", "search", {"q": "risk"}))),
    Message("user", (ToolResultBlock("t1", "3 notes"),)),
)


def request(messages: tuple[Message, ...] = HISTORY, system: tuple[TextBlock, ...] = ()) -> Request:
    return Request(model="m", messages=messages, system=system, tools=TOOLS)


def marked(req: Request) -> list[tuple[str, int, object]]:
    """Every marker of ``req`` as (where, index, cache_control), in prompt order."""
    out: list[tuple[str, int, object]] = []
    out += [("tool", i, t.cache_control) for i, t in enumerate(req.tools) if t.cache_control]
    out += [("system", i, b.cache_control) for i, b in enumerate(req.system) if b.cache_control]
    blocks = [b for m in req.messages for b in m.content]
    out += [
        ("block", i, getattr(b, "cache_control", None))
        for i, b in enumerate(blocks)
        if getattr(b, "cache_control", None)
    ]
    return out


# -- for which models ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "model", [OPENAI, ScriptedModel([]), None], ids=["openai", "scripted", "none"]
)
async def test_a_model_without_breakpoints_gets_the_request_untouched(model: Any) -> None:
    original = ModelRequest(request(), new_state(), model=model)
    seen = Capture(Usage(cache_read_input_tokens=0))
    await PromptCacheMiddleware().wrap_model_call(original, seen)
    assert seen.requests[0] is original
    assert original.state.private == {}  # nothing watched for a call it did not mark


async def test_an_anthropic_call_gets_three_breakpoints() -> None:
    system = (TextBlock("Be careful."), TextBlock("Plan: x"), TextBlock("Memory: y"))
    seen = Capture()
    req = ModelRequest(request(system=system), new_state(), {"prompt_cache": 1}, ANTHROPIC)
    await PromptCacheMiddleware().wrap_model_call(req, seen)
    sent = seen.requests[0].request
    assert marked(sent) == [("tool", 1, FIVE), ("system", 1, FIVE), ("block", 3, FIVE)]
    # Nothing but the markers changed; history itself never is.
    assert attrs.evolve(sent, tools=TOOLS, system=system, messages=HISTORY) == req.request
    assert marked(req.request) == []


async def test_a_memory_contributor_lands_after_the_breakpoint() -> None:
    class Contributor:
        def __init__(self, name: str, text: str) -> None:
            self.name, self.text = name, text

        def system_blocks(self, state: State) -> tuple[TextBlock, ...]:
            return (TextBlock(self.text),)

    chain = Chain.build(
        [Contributor("todo", "Plan."), PromptCacheMiddleware(), Contributor("memory", "Memory.")]
    )
    seen = Capture()
    req = request(system=(TextBlock("Agent."),))
    await chain.model_call(ModelRequest(req, new_state(), model=ANTHROPIC), seen)
    system = seen.requests[0].request.system
    assert [(b.text, b.cache_control) for b in system] == [
        ("Agent.", None),
        ("Plan.", FIVE),
        ("Memory.", None),
    ]


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        (Message.user("question"), [("block", 4, FIVE)]),
        (Message("user", (TextBlock("q"), TextBlock(""))), [("block", 4, FIVE)]),
        (Message("assistant", (ThinkingBlock("hm", "sig"),)), []),
    ],
    ids=["text", "empty-text-skipped", "nothing-to-mark"],
)
def test_the_conversation_breakpoint_is_on_the_last_block_that_takes_one(
    last: Message, expected: list[Any]
) -> None:
    req = request(messages=(*HISTORY, last))
    out = place_breakpoints(req, -1, FIVE, FIVE)
    assert [m for m in marked(out) if m[0] == "block"] == expected


def test_markers_set_elsewhere_are_replaced_by_the_configured_ones() -> None:
    foreign = {"type": "ephemeral", "ttl": "1h"}
    messages = (
        Message("user", (TextBlock("old", foreign),)),
        Message("assistant", (TextBlock("a"),)),
        Message("user", (ToolResultBlock("t", "r", cache_control=foreign),)),
        Message.user("new"),
    )
    system = tuple(TextBlock(t, foreign) for t in "abcd")
    req = Request(
        model="m",
        messages=messages,
        system=system,
        tools=(
            ToolSpec("a", "", {}, cache_control=foreign),
            ToolSpec("b", "", {}),
        ),
    )
    out = place_breakpoints(req, 1, FIVE, FIVE)
    assert marked(out) == [("tool", 1, FIVE), ("system", 1, FIVE), ("block", 3, FIVE)]


def test_a_request_already_marked_is_returned_as_it_is() -> None:
    once = place_breakpoints(request(system=(TextBlock("s"),)), 0, HOUR, FIVE)
    assert place_breakpoints(once, 0, HOUR, FIVE) is once


@st.composite
def requests(draw: st.DrawFn) -> tuple[Request, int, str, str]:
    cc = st.one_of(st.none(), st.sampled_from([FIVE, HOUR]))
    tools = tuple(
        ToolSpec(f"t{i}", "", {}, cache_control=draw(cc)) for i in range(draw(st.integers(0, 4)))
    )
    system = tuple(
        TextBlock(draw(st.text(max_size=3)), draw(cc)) for _ in range(draw(st.integers(0, 4)))
    )
    block = st.one_of(
        st.builds(TextBlock, st.text(max_size=3), cc),
        st.builds(ToolResultBlock, st.just("t"), st.text(max_size=3), st.booleans(), cc),
        st.builds(ThinkingBlock, st.just("x"), st.just("s")),
        st.builds(ToolUseBlock, st.just("t"), st.just("f"), st.just({})),
    )
    messages = tuple(
        Message(role, tuple(draw(st.lists(block, min_size=1, max_size=3))))
        for role in draw(st.lists(st.sampled_from(["user", "assistant"]), min_size=1, max_size=5))
    )
    system_end = draw(st.integers(-1, len(system) - 1))
    ttl = draw(st.sampled_from(TTLS))
    messages_ttl = draw(st.sampled_from(TTLS[: TTLS.index(ttl) + 1]))
    return Request("m", messages, system, tools), system_end, ttl, messages_ttl


def _strip(req: Request) -> Request:
    def bare(b: Block) -> Block:
        return (
            attrs.evolve(b, cache_control=None) if isinstance(b, TextBlock | ToolResultBlock) else b
        )

    return attrs.evolve(
        req,
        tools=tuple(attrs.evolve(t, cache_control=None) for t in req.tools),
        system=tuple(attrs.evolve(b, cache_control=None) for b in req.system),
        messages=tuple(Message(m.role, tuple(bare(b) for b in m.content)) for m in req.messages),
    )


@given(requests())
def test_never_more_than_four_breakpoints_and_ttls_never_increase(
    case: tuple[Request, int, str, str],
) -> None:
    req, system_end, ttl, messages_ttl = case
    out = place_breakpoints(req, system_end, marker(ttl), marker(messages_ttl))
    found = marked(out)
    assert len(found) <= 3  # the API takes four
    hours = [cc == HOUR for _, _, cc in found]  # in prompt order: tools, system, messages
    assert hours == sorted(hours, reverse=True)
    assert ("tool", len(req.tools) - 1, marker(ttl)) in found or not req.tools
    assert ("system", system_end, marker(ttl)) in found or system_end < 0
    assert _strip(out) == _strip(req)  # only markers ever change


# -- the cache-bust watch ----------------------------------------------------------------------


async def test_a_call_reading_back_much_less_than_the_cached_prefix_is_a_bust(
    recording_span: Callable[[], AbstractContextManager[Span]], exporter: InMemorySpanExporter
) -> None:
    seen = Capture(
        Usage(cache_creation_input_tokens=2000),
        Usage(cache_read_input_tokens=2000, cache_creation_input_tokens=300),
        Usage(cache_read_input_tokens=1200),  # >= half of 2300: not a bust
        Usage(cache_read_input_tokens=500),  # < half of 1200
    )
    mw, state = PromptCacheMiddleware(), new_state()
    with recording_span():
        for _ in range(4):
            await mw.wrap_model_call(ModelRequest(request(), state, model=ANTHROPIC), seen)
            assert state.private["prompt_cache"]  # kept after every call
    (span,) = exporter.get_finished_spans()
    busts = [dict(e.attributes or {}) for e in span.events if e.name == CACHE_BUST]
    assert busts == [
        {
            telemetry.MIDDLEWARE_NAME: "prompt_cache",
            telemetry.REASON: "cached prefix read back short",
            EXPECTED_TOKENS: 1200,
            READ_TOKENS: 500,
        }
    ]
    assert state.private["prompt_cache"] == {"tokens": 500}


async def test_a_call_to_another_provider_leaves_the_established_prefix_alone() -> None:
    mw, state = PromptCacheMiddleware(), new_state()
    await mw.wrap_model_call(
        ModelRequest(request(), state, model=ANTHROPIC),
        Capture(Usage(cache_creation_input_tokens=900)),
    )
    await mw.wrap_model_call(
        ModelRequest(request(), state, model=OPENAI), Capture(Usage(cache_read_input_tokens=5))
    )
    assert state.private["prompt_cache"] == {"tokens": 900}


async def test_a_malformed_private_state_names_the_middleware() -> None:
    state = new_state()
    state.private["prompt_cache"] = {"tokens": "many"}
    with pytest.raises(StateError, match="'prompt_cache'"):
        await PromptCacheMiddleware().wrap_model_call(
            ModelRequest(request(), state, model=ANTHROPIC), Capture()
        )


box = ToolBox()


@box.tool
def lookup(term: str) -> str:
    """Look a term up."""
    return f"{term}: found"


class ScriptedAnthropic(ScriptedModel):
    provider_name = "anthropic"


async def test_the_established_prefix_survives_a_kill_and_resume(
    tmp_path: Path,
    recording_span: Callable[[], AbstractContextManager[Span]],
    exporter: InMemorySpanExporter,
) -> None:
    box.kill("lookup")  # the first call ends the process's run, as a kill -9 would
    model = ScriptedAnthropic.from_turns(
        [
            {
                "tool_calls": [{"name": "lookup", "input": {"term": "vent"}}],
                "usage": {"input_tokens": 10, "cache_creation_input_tokens": 2400},
            },
            {"text": "Found.", "usage": {"input_tokens": 10, "cache_read_input_tokens": 100}},
        ]
    )
    agent = AgentDefinition(name="t", model="scripted:inline", system=("Be careful.",))

    def harness(store: SqliteRunStore) -> Harness:
        # A new plugin manager each time: a new middleware, as in a new process.
        pm = make_plugin_manager(load_entrypoints=False)
        pm.register(hango_prompt_cache, name="prompt_cache")
        return Harness(store, model=model, plugins=pm, tools=ToolRegistry([lookup]), settings={})

    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        seen = await kill_and_resume(
            store, harness, agent, "look up vent", killed_by=Killed, around_resume=recording_span
        )
    killed, finished, record = seen.killed, seen.finished, seen.record
    assert killed.status is RunStatus.RUNNING
    assert killed.state["private"]["prompt_cache"] == {"tokens": 2400}
    assert finished.status is RunStatus.COMPLETED
    (span,) = exporter.get_finished_spans()
    (bust,) = [dict(e.attributes or {}) for e in span.events if e.name == CACHE_BUST]
    assert (bust[EXPECTED_TOKENS], bust[READ_TOKENS]) == (2400, 100)
    assert record.state["private"]["prompt_cache"] == {"tokens": 100}


# -- the plugin and its options --------------------------------------------------------------


def test_installed_through_entry_point() -> None:
    placed = assert_installed(
        "prompt_cache", "hango-prompt-cache", hango_prompt_cache, middleware="prompt_cache"
    )
    assert STACK_ORDER.index("model_fallback") < placed.slot == STACK_ORDER.index("prompt_cache")
    assert placed.slot < STACK_ORDER.index("memory")
    assert placed.capabilities == ("model_wrapper",)
    mw = placed.middleware
    assert isinstance(mw, PromptCacheMiddleware)
    assert (mw.ttl, mw.messages_ttl, mw.bust_threshold) == ("5m", "5m", 0.5)


def build(table: dict[str, Any] | None = None, **settings: str) -> PromptCacheMiddleware:
    config = StackConfig(
        settings=settings,
        middleware_options={} if table is None else {"prompt_cache": table},
        source="agent 't'",
    )
    return hango_prompt_cache.hango_middleware(config=config)


def test_the_table_sets_each_key() -> None:
    mw = build({"ttl": "1h", "messages_ttl": "5m", "bust_threshold": 0.25})
    assert (mw.ttl, mw.messages_ttl, mw.bust_threshold) == ("1h", "5m", 0.25)
    assert build({"ttl": "1h"}).messages_ttl == "1h"  # the conversation follows ttl


def test_the_variables_are_defaults_and_the_table_wins_key_by_key() -> None:
    env = {
        "HANGO_PROMPT_CACHE_TTL": "1h",
        "HANGO_PROMPT_CACHE_MESSAGES_TTL": "1h",
        "HANGO_PROMPT_CACHE_BUST_THRESHOLD": "0.8",
    }
    from_env = build(**env)
    assert (from_env.ttl, from_env.messages_ttl, from_env.bust_threshold) == ("1h", "1h", 0.8)
    mixed = build({"messages_ttl": "5m"}, **env)
    assert (mixed.ttl, mixed.messages_ttl, mixed.bust_threshold) == ("1h", "5m", 0.8)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"ttl": "10m"}, r"\[options.prompt_cache\].ttl: '10m' is not one of \['5m', '1h'\]"),
        (
            {"bust_threshold": 0},
            r"\[options.prompt_cache\].bust_threshold: 0 is less than or equal",
        ),
        ({"bust_threshold": 1.5}, r"\[options.prompt_cache\].bust_threshold: 1.5 is greater than"),
        ({"tll": "1h"}, r"\[options.prompt_cache\]: Additional properties are not allowed \('tll'"),
    ],
)
def test_an_invalid_table_is_refused_naming_the_field(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_options({"prompt_cache": table}, make_plugin_manager(env={}), source="agent 't'")


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("HANGO_PROMPT_CACHE_TTL", "1 hour", "HANGO_PROMPT_CACHE_TTL must be one of 5m, 1h"),
        ("HANGO_PROMPT_CACHE_BUST_THRESHOLD", "half", "must be a number, got 'half'"),
        ("HANGO_PROMPT_CACHE_BUST_THRESHOLD", "nan", r"bust_threshold must be in \(0, 1\]"),
    ],
)
def test_an_invalid_variable_is_refused_naming_it(variable: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        build(**{variable: raw})
    assert variable in str(caught.value)


def test_a_conversation_ttl_longer_than_the_prefix_ttl_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError) as caught:
        build({"messages_ttl": "1h"}, HANGO_PROMPT_CACHE_TTL="5m")
    assert str(caught.value) == (
        "agent 't': prompt_cache: messages_ttl '1h' is longer than ttl '5m': TTLs must not "
        "increase along the prompt (tools and system come before the messages) (ttl from "
        "HANGO_PROMPT_CACHE_TTL, messages_ttl from [options.prompt_cache].messages_ttl)"
    )


def test_conflicting_variables_are_the_deployments_not_the_agents() -> None:
    with pytest.raises(ConfigError) as caught:
        build(HANGO_PROMPT_CACHE_TTL="5m", HANGO_PROMPT_CACHE_MESSAGES_TTL="1h")
    assert str(caught.value).startswith("prompt_cache: messages_ttl '1h' is longer than ttl")
    assert str(caught.value).endswith(
        "(ttl from HANGO_PROMPT_CACHE_TTL, messages_ttl from HANGO_PROMPT_CACHE_MESSAGES_TTL)"
    )
