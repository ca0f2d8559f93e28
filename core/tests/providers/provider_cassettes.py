"""Replay recorded API exchanges through the real SDK clients, with no network.

The cassettes live beside this module in ``cassettes/`` (their README.md gives sources, licences
and format). They are VCR.py YAML in two dialects: pydantic-ai's, with JSON bodies decoded under
``parsed_body`` and streamed bodies kept as raw SSE text in ``response.body.string``; and plain
vcrpy's, with the request body as a JSON string. ``load`` reads both.

The SDKs send through ``httpx2`` (respx patches only ``httpx``), so a ``Replay`` (hango.testing's
``FakeServer``) is served by an ``httpx2.MockTransport``: each request gets the next recorded
response, and the request bodies the SDK really sent are kept for comparison with the recorded
ones. The SSE streams are hango.testing's ``anthropic_stream`` / ``openai_stream``.

The providers always stream. For a recording of a NON-streaming exchange, ``served`` synthesizes
the equivalent SSE stream from the recorded JSON response (following each API's documented
streaming format), so the same recording still checks the accumulated message and the follow-up
request hango builds.

Recorded requests are compared after ``anthropic_request`` / ``openai_request`` normalization,
which only applies equivalences each API defines (a string ``system`` is one text block, a
tool_result's string content is one text part, ``is_error`` defaults to false, a tool's
``type: custom`` and a block's ``caller: {type: direct}`` are defaults, tool-call
``arguments`` are JSON text, an assistant message without text may have null, absent or ``""``
content) and drops the request options hango does not express (each listed
with its reason). Content (blocks, their order, ids, signatures) is never normalized.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import yaml
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hango.provider import (
    Block,
    Message,
    RedactedThinkingBlock,
    Request,
    ServerBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from hango.provider.messages import StopReason, Usage
from hango.testing.providers import Served, anthropic_stream, openai_stream

CASSETTES = Path(__file__).parent / "cassettes"

JSONDict = dict[str, Any]


@attrs.frozen
class Interaction:
    request: JSONDict
    status: int
    content_type: str
    body: bytes
    streamed: bool

    def json(self) -> JSONDict:
        result: JSONDict = json.loads(self.body)
        return result


@attrs.frozen
class Turn:
    """What one recorded turn must give: its stop reason and usage (and the final message)."""

    stop_reason: StopReason
    usage: Usage
    #: the expected message of a streamed last turn, which no later recorded request repeats
    final: tuple[Block, ...] | None = None


def load(name: str) -> list[Interaction]:
    """The interactions of cassette ``name`` (e.g. ``"anthropic/x.yaml"``)."""
    doc = yaml.safe_load((CASSETTES / name).read_text(encoding="utf-8"))
    interactions = []
    for raw in doc["interactions"]:
        request, response = raw["request"], raw["response"]
        body_json = (
            request["parsed_body"] if "parsed_body" in request else json.loads(request["body"])
        )
        headers = {k.lower(): v for k, v in response["headers"].items()}
        content_type = headers.get("content-type", ["application/json"])[0]
        if "parsed_body" in response:
            body = json.dumps(response["parsed_body"]).encode()
        else:
            body = response["body"]["string"].encode()
        interactions.append(
            Interaction(
                request=body_json,
                status=response["status"]["code"],
                content_type=content_type,
                body=body,
                streamed=content_type.startswith("text/event-stream"),
            )
        )
    return interactions


def served(interaction: Interaction, api: str) -> Served:
    """What the mock server answers for ``interaction``: the recording itself, or for a
    non-streaming success the SSE stream synthesized from its JSON (see module docstring)."""
    if interaction.streamed or interaction.status != 200:
        return Served(interaction.status, interaction.content_type, interaction.body)
    synthesize = anthropic_stream if api == "anthropic" else openai_stream
    return Served(200, "text/event-stream", synthesize(interaction.json()))


# --- recorded wire format -> hango records (to build the requests hango sends) -------------


def _tool_result_text(content: str | list[JSONDict]) -> str:
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


def anthropic_block(block: JSONDict) -> Block:
    match block["type"]:
        case "text":
            citations = tuple(block.get("citations") or ())
            return TextBlock(block["text"], block.get("cache_control"), citations)
        case "tool_use":
            return ToolUseBlock(block["id"], block["name"], block["input"])
        case "tool_result":
            content = _tool_result_text(block["content"])
            return ToolResultBlock(block["tool_use_id"], content, block.get("is_error", False))
        case "thinking":
            return ThinkingBlock(block["thinking"], block["signature"])
        case "redacted_thinking":
            return RedactedThinkingBlock(block["data"])
    return ServerBlock(block)


def anthropic_messages(wire: Sequence[JSONDict]) -> tuple[Message, ...]:
    return tuple(
        Message(
            m["role"],
            (TextBlock(m["content"]),)
            if isinstance(m["content"], str)
            else tuple(anthropic_block(b) for b in m["content"]),
        )
        for m in wire
    )


#: Keys of a recorded tool definition that a ``ToolSpec`` expresses; any other key of a custom
#: tool is an amendment hango sends through ``Request.server_tools`` under the tool's name.
_TOOL_SPEC_KEYS = {"name", "description", "input_schema", "strict", "type"}


def anthropic_tools(wire: Sequence[JSONDict]) -> tuple[tuple[ToolSpec, ...], tuple[JSONDict, ...]]:
    """Recorded tool definitions as hango's ``tools`` and ``server_tools``: a custom tool (one
    with an ``input_schema``) is a ``ToolSpec`` plus its other keys as an amendment, anything
    else (a server or Anthropic-defined tool) a ``server_tools`` entry as written."""
    specs: list[ToolSpec] = []
    server: list[JSONDict] = []
    for tool in wire:
        if "input_schema" not in tool:
            server.append(tool)
            continue
        name = tool["name"]
        specs.append(
            ToolSpec(
                name,
                tool.get("description", ""),
                tool["input_schema"],
                strict=tool.get("strict", False),
            )
        )
        amendment = {k: v for k, v in tool.items() if k not in _TOOL_SPEC_KEYS}
        if amendment:
            server.append({"name": name, **amendment})
    return tuple(specs), tuple(server)


def anthropic_first_request(body: JSONDict) -> Request:
    system = body.get("system", ())
    tools, server_tools = anthropic_tools(body.get("tools", ()))
    choice = body.get("tool_choice")
    return Request(
        model=body["model"],
        messages=anthropic_messages(body["messages"]),
        system=(TextBlock(system),)
        if isinstance(system, str)
        else tuple(TextBlock(b["text"], b.get("cache_control")) for b in system),
        tools=tools,
        server_tools=server_tools,
        tool_choice=None if choice is None else ToolChoice(choice["type"], choice.get("name")),
        parallel_tool_calls=False if (choice or {}).get("disable_parallel_tool_use") else None,
        max_tokens=body["max_tokens"],
        temperature=body.get("temperature"),
        stop_sequences=tuple(body.get("stop_sequences", ())),
    )


def openai_messages(wire: Sequence[JSONDict]) -> tuple[tuple[TextBlock, ...], tuple[Message, ...]]:
    """System blocks and hango messages; consecutive ``role: tool`` replies form one user
    message, as hango keeps a batch's results together."""
    system: list[TextBlock] = []
    messages: list[Message] = []
    for m in wire:
        role = m["role"]
        if role in ("system", "developer"):
            system.append(TextBlock(m["content"]))
        elif role == "user":
            messages.append(Message.user(m["content"]))
        elif role == "assistant":
            blocks: list[Block] = [TextBlock(m["content"])] if m.get("content") else []
            blocks += [
                ToolUseBlock(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in m.get("tool_calls") or ()
            ]
            messages.append(Message("assistant", tuple(blocks)))
        else:
            result = ToolResultBlock(m["tool_call_id"], m["content"])
            if messages and messages[-1].role == "user" and messages[-1].tool_results:
                messages[-1] = Message("user", (*messages[-1].content, result))
            else:
                messages.append(Message("user", (result,)))
    return tuple(system), tuple(messages)


def openai_first_request(body: JSONDict) -> Request:
    system, messages = openai_messages(body["messages"])
    return Request(
        model=body["model"],
        messages=messages,
        system=system,
        tools=tuple(
            ToolSpec(
                t["function"]["name"],
                t["function"].get("description", ""),
                t["function"]["parameters"],
            )
            for t in body.get("tools", ())
        ),
        max_tokens=body.get("max_completion_tokens", 4096),
    )


# --- request normalization (see module docstring) -----------------------------------------

#: Anthropic request options hango does not express, so recordings may differ there:
_ANTHROPIC_IGNORED = {
    "stream",  # non-streaming recordings; hango always streams
    "cache_control",  # top-level automatic caching; hango places breakpoints on blocks
}


_DIRECT = {"type": "direct"}


def _anthropic_content(content: str | list[JSONDict]) -> list[JSONDict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = []
    for block in content:
        if block.get("caller") == _DIRECT:
            # the default caller (the model itself): hango sends a server block back with the
            # field, as the API sent it; pydantic-ai's recorded requests leave it out
            block = {k: v for k, v in block.items() if k != "caller"}
        if block["type"] == "tool_result":
            block = {
                **block,
                "content": _tool_result_text(block["content"]),
                "is_error": block.get("is_error", False),
            }
        blocks.append(block)
    return blocks


def anthropic_request(body: JSONDict) -> JSONDict:
    """``body`` up to the equivalences the Messages API defines (see module docstring)."""
    out = {k: v for k, v in body.items() if k not in _ANTHROPIC_IGNORED}
    if "system" in out:
        out["system"] = _anthropic_content(out["system"])
    out["messages"] = [
        {"role": m["role"], "content": _anthropic_content(m["content"])} for m in out["messages"]
    ]
    if "tools" in out:  # a custom tool's "type" is optional: "custom" is the default
        out["tools"] = [
            {k: v for k, v in t.items() if (k, v) != ("type", "custom")} for t in out["tools"]
        ]
    return out


#: Chat Completions request options hango does not express or sets on its own:
_OPENAI_IGNORED = {
    "stream",  # non-streaming recordings; hango always streams
    "stream_options",  # hango always asks for include_usage
    "tool_choice",  # "auto" is the default; hango never forces a call
    "max_completion_tokens",  # hango always sends Request.max_tokens; checked where recorded
    "max_tokens",
    "n",  # 1 is the default
}


def _openai_message(message: JSONDict) -> JSONDict:
    out = dict(message)
    if out["role"] == "assistant":
        # absent, null and "" are the same "no text" (hango sends "": some servers reject null)
        out["content"] = out.get("content") or ""
        if "tool_calls" in out:
            out["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.loads(c["function"]["arguments"]),
                    },
                }
                for c in out["tool_calls"]
            ]
    return out


def openai_request(body: JSONDict) -> JSONDict:
    """``body`` up to the equivalences Chat Completions defines (see module docstring)."""
    out = {k: v for k, v in body.items() if k not in _OPENAI_IGNORED}
    out["messages"] = [_openai_message(m) for m in out["messages"]]
    if "tools" in out:
        # strict mode (structured outputs) is a pydantic-ai choice; ToolSpec has no such flag
        out["tools"] = [
            {**t, "function": {k: v for k, v in t["function"].items() if k != "strict"}}
            for t in out["tools"]
        ]
    return out


# --- pydantic-ai's string normalization -------------------------------------------------------

_SMART = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "--"}
    | {"\u2026": "..."}
)


def as_recorded(value: Any) -> Any:
    """``value`` with every string normalized the way pydantic-ai's cassette writer stores
    ``parsed_body`` strings (smart quotes, dashes and the ellipsis to ASCII, then NFKC), so that a
    request hango builds from a raw streamed body compares with the request pydantic-ai recorded
    (see the cassettes' README)."""
    if isinstance(value, str):
        return unicodedata.normalize("NFKC", value.translate(_SMART))
    if isinstance(value, dict):
        return {k: as_recorded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_recorded(v) for v in value]
    return value


# --- telemetry ------------------------------------------------------------------------------


@contextmanager
def recorded_span() -> Iterator[list[ReadableSpan]]:
    """Run the block inside a recording span; the list holds the finished span afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    finished: list[ReadableSpan] = []
    with provider.get_tracer("hango.tests").start_as_current_span("chat test"):
        yield finished
    finished.extend(exporter.get_finished_spans())
    provider.shutdown()


def with_messages(request: Request, *messages: Message) -> Request:
    return attrs.evolve(request, messages=(*request.messages, *messages))
