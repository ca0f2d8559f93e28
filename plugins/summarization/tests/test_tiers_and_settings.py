"""Tier 1 (tool results cleared, named; excluded tools kept), what a compaction reports (the
span event, the CLI line), the providers' "too long" errors as the SDKs raise them, the store
loading from a mark, and bad ``[options.summarization]`` tables (one line, nothing recorded)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span
from rich.console import Console

from hango import (
    ContextCompacted,
    Message,
    ModelError,
    ModelResponse,
    Request,
    RunSave,
    StopReason,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from hango.cli.render import Renderer
from hango.middleware import ModelRequest
from hango.store.base import RunStore
from hango.testing import FakeAnthropic, FakeOpenAI, HangoCli, history_problems, new_state
from hango.testing.providers import Served, anthropic_error
from hango_summarization import (
    CONTEXT_COMPACTED,
    INSTRUCTION,
    Settings,
    SummarizationMiddleware,
    too_long,
)

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "summarization"
OFFLOADED = (
    "[This result was 120000 characters (about 30000 tokens) and 900 lines, too large for the "
    "context. It is saved in full at /large_tool_results/call_0: page through it]"
)


def tool_history(n: int) -> list[Message]:
    """A prompt, then ``n`` turns each calling ``look`` and ``pinned`` (results of ~1,200
    characters; the first ``look`` result is an offloaded preview)."""
    out = [Message("user", (TextBlock("Look at everything."),))]
    for i in range(n):
        out.append(
            Message(
                "assistant",
                (
                    ToolUseBlock(f"call_{i}", "look", {"n": i}),
                    ToolUseBlock(f"pin_{i}", "pinned", {"n": i}),
                ),
            )
        )
        first = OFFLOADED if i == 0 else f"look {i}: " + "x" * 1200
        out.append(
            Message(
                "user",
                (
                    ToolResultBlock(f"call_{i}", first),
                    ToolResultBlock(f"pin_{i}", f"pinned {i}: " + "y" * 1200),
                ),
            )
        )
    return out


async def call_once(
    mw: SummarizationMiddleware, messages: list[Message]
) -> tuple[list[ModelRequest], list[ContextCompacted]]:
    state = new_state(messages)
    seen: list[ModelRequest] = []
    events: list[ContextCompacted] = []

    async def emit(event: ContextCompacted) -> None:
        events.append(event)

    async def next_(req: ModelRequest) -> ModelResponse:
        seen.append(req)
        text = "a summary" if req.purpose == "summary" else "ok"
        return ModelResponse(Message("assistant", (TextBlock(text),)), StopReason.END_TURN, Usage())

    request = Request(model="m", messages=tuple(messages))
    await mw.wrap_model_call(ModelRequest(request, state, emit=emit), next_)
    return seen, events


async def test_tier_one_clears_old_results_naming_tool_call_and_file() -> None:
    mw = SummarizationMiddleware(
        Settings(trigger_tokens=3500, keep_tool_results=2, exclude_tools=("pinned",))
    )
    seen, events = await call_once(mw, tool_history(8))
    assert [r.purpose for r in seen] == ["turn"]  # tier 1 was enough: no summary call
    assert [e.tier for e in events] == ["tool_results"]
    assert events[0].tokens_after < events[0].tokens_before
    sent = seen[0].request.messages
    assert history_problems(sent) == []
    results = {r.tool_use_id: r.content for m in sent for r in m.tool_results}
    # The latest two results are whole; older look results are placeholders; pinned never.
    assert results["call_7"].startswith("look 7: ") and results["pin_7"].startswith("pinned 7")
    assert results["call_3"] == (
        "[result of tool 'look' (call call_3) cleared to save context: 1208 characters]"
    )
    assert "the full result is in the file /large_tool_results/call_0" in results["call_0"]
    assert all(results[f"pin_{i}"].startswith(f"pinned {i}: ") for i in range(8))


async def test_the_compaction_is_a_span_event_without_content(
    recording_span: Callable[[], AbstractContextManager[Span]], exporter: InMemorySpanExporter
) -> None:
    mw = SummarizationMiddleware(
        Settings(trigger_tokens=2000, keep_tokens=300, clear_tool_results=False)
    )
    with recording_span():
        seen, events = await call_once(mw, tool_history(12))
    assert [e.tier for e in events] == ["summary"]
    assert [r.purpose for r in seen] == ["summary", "turn"]
    assert seen[0].request.messages[-1].content[-1] == TextBlock(INSTRUCTION)
    (span,) = exporter.get_finished_spans()
    (event,) = [e for e in span.events if e.name == CONTEXT_COMPACTED]
    attributes = dict(event.attributes or {})
    assert attributes["hango.summarization.tier"] == "summary"
    assert attributes["hango.summarization.tokens_before"] == events[0].tokens_before
    assert attributes["hango.summarization.tokens_after"] == events[0].tokens_after
    assert attributes["hango.summarization.messages_covered"] == events[0].messages
    assert "a summary" not in json.dumps(attributes)


async def test_the_cli_prints_one_line_per_compaction() -> None:
    out = io.StringIO()
    renderer = Renderer(Console(file=out, width=100), live=False)
    with renderer:
        await renderer.event(ContextCompacted("summary", 182_400, 31_200, 120))
        await renderer.event(ContextCompacted("tool_results", 2_340, 1_410, 0))
    assert out.getvalue().splitlines() == [
        "context compacted: 182k -> 31k tokens (summary)",
        "context compacted: 2.3k -> 1.4k tokens (tool_results)",
    ]


async def test_the_providers_context_errors_are_recognised_as_too_long() -> None:
    refused = FakeAnthropic(
        [
            anthropic_error(
                400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
            )
        ]
    )
    request = Request(model="claude-test", messages=(Message("user", (TextBlock("hi"),)),))
    with pytest.raises(ModelError) as anthropic_failed:
        async for _ in refused.model().stream(request):
            pass
    assert too_long(anthropic_failed.value)
    body = {
        "error": {
            "message": "This model's maximum context length is 128000 tokens.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    openai = FakeOpenAI([Served(400, "application/json", json.dumps(body).encode(), {})])
    with pytest.raises(ModelError) as openai_failed:
        async for _ in openai.model().stream(request):
            pass
    assert too_long(openai_failed.value)
    assert not too_long(ModelError("invalid_request_error: tools.0: bad schema", status=400))
    assert not too_long(ModelError("overloaded", status=529, transient=True))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg's async API needs asyncio


async def test_the_store_loads_a_session_from_an_index(store: RunStore, tenant: uuid.UUID) -> None:
    agent = await store.put_agent(tenant, "a", {"name": "a"})
    history = tool_history(3)
    run = await store.create_run(tenant, agent.id, history[0])
    await store.save_run(
        RunSave(
            tenant,
            run.id,
            version=run.version,
            status=run.status,
            state={},
            messages=history[1:],
            from_index=1,
        )
    )
    assert await store.load_messages(tenant, run.session_id) == history
    assert await store.load_messages(tenant, run.session_id, start=3) == history[3:]
    assert await store.load_messages(tenant, run.session_id, start=7) == []


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("keep_messages = 4", "keep_tokens and keep_messages exclude each other; set one"),
        ('model = "nosuch:x"', "[options.summarization].model: unknown model provider 'nosuch'"),
        ("trigger = 2", "[options.summarization].trigger: 2 is greater than the maximum of 1"),
        ("keep_tool_results = -1", "[options.summarization].keep_tool_results: -1 is less"),
        ("keep = 3", "[options.summarization]"),
    ],
)
def test_a_bad_table_is_one_line_naming_file_and_key(tmp_path: Path, line: str, says: str) -> None:
    folder = tmp_path / "agent"
    folder.mkdir()
    for name in ("pages.py", "script.toml"):
        (folder / name).write_text((EXAMPLE / name).read_text())
    text = (EXAMPLE / "agent.toml").read_text().replace("keep_tool_results = 2\n", "")
    (folder / "agent.toml").write_text(f"{text}{line}\n")
    cli = HangoCli(tmp_path)
    done = cli.run("run", "--agent", str(folder / "agent.toml"), "Check the log.")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "agent.toml" in lines[0] and says in lines[0]
    assert anyio.run(cli.runs) == []  # nothing recorded
