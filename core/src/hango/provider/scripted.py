"""``ScriptedModel``: replays a script of assistant turns, streaming like a real provider.

A script is a TOML (or JSON) file::

    delay_ms = 10                      # optional pause between stream events, for demos

    [[turns]]
    text = "Let me look."              # optional; streamed as several text deltas
    stop_reason = "tool_use"           # optional; default: tool_use with calls, else end_turn
    usage = { input_tokens = 120, output_tokens = 30 }   # optional
    [[turns.tool_calls]]
    name = "list_files"
    input = { path = "." }             # streamed as several JSON deltas

    [[turns]]
    text = "Done."

Turn ``k`` answers the request whose history already holds ``k`` assistant messages, so the
model is a pure function of the request: a resumed or continued run picks up where its
history says it is, in any process. An empty turn (no text, thinking or calls) is a reply the
loop never sends back (providers refuse empty messages), so it is counted where it shows: a
user message directly after another user message, when the script's next turn is empty.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import anyio
import cattrs
from attrs import field, frozen
from cattrs.v import format_exception

from hango.provider.errors import ModelError, ScriptError
from hango.provider.events import (
    MessageStop,
    RedactedThinking,
    SignatureDelta,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango.provider.messages import Message, Request, StopReason, Usage


@frozen
class ScriptedThinking:
    thinking: str
    signature: str = ""


@frozen
class ScriptedCall:
    name: str
    input: dict[str, Any] = field(factory=dict)
    id: str | None = None


@frozen
class ScriptedTurn:
    text: str | None = None
    thinking: ScriptedThinking | None = None
    redacted_thinking: str | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()
    stop_reason: StopReason | None = None
    usage: Usage = field(factory=Usage)

    @property
    def empty(self) -> bool:
        """No content at all: the model's reply is an empty message (an empty end_turn)."""
        return not (self.text or self.thinking or self.redacted_thinking or self.tool_calls)


def _string(value: object, _: object) -> str:
    # cattrs would turn ``text = 5`` into "5": a script is checked, not coerced.
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__} {value!r}")
    return value


def _token_count(value: object, _: object) -> int:
    # The script's only integers are usage token counts.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a token count (an integer >= 0), got {value!r}")
    return value


def _explain(exc: BaseException, cls: type | None) -> str:
    # Our hooks' own words ("expected a token count ..., got -3") over cattrs' generic ones.
    if type(exc) is ValueError:
        return str(exc)
    return format_exception(exc, cls)


_converter = cattrs.Converter(forbid_extra_keys=True)
_converter.register_structure_hook(str, _string)
_converter.register_structure_hook(int, _token_count)
# StopReason is a str subclass: without its own hook the str hook above would take it.
_converter.register_structure_hook(StopReason, lambda value, _: StopReason(value))


def _chunks(text: str, n: int) -> list[str]:
    """Split ``text`` into about ``n`` pieces at word boundaries (a real stream's shape)."""
    if not text:
        return []
    words = text.split(" ")
    step = max(1, len(words) // n)
    pieces = [" ".join(words[i : i + step]) for i in range(0, len(words), step)]
    return [p + (" " if i < len(pieces) - 1 else "") for i, p in enumerate(pieces)]


class ScriptedModel:
    """A ``Model`` that replays ``turns``; raises ``ModelError("script exhausted after N turns")``
    when asked for a turn past the end."""

    #: ``gen_ai.provider.name`` on its spans.
    provider_name: Final = "hango.scripted"
    #: A structured output is the script's text (``output_strategy`` "native"), as a
    #: provider's native structured output is the model's text; a script may still call
    #: the final-answer tool under ``output_strategy = "tool"``.
    native_output: Final = True

    def __init__(
        self, turns: Sequence[ScriptedTurn], *, delay: float = 0.0, name: str = "scripted"
    ):
        self.turns = tuple(turns)
        self.delay = delay
        self.name = name

    @classmethod
    def from_turns(
        cls, turns: Sequence[Mapping[str, Any]], *, delay: float = 0.0, source: str = "<script>"
    ) -> ScriptedModel:
        """Build from plain dicts in the script-file shape; raises ``ScriptError``."""
        parsed = []
        for i, raw in enumerate(turns):
            try:
                parsed.append(_converter.structure(raw, ScriptedTurn))
            except Exception as exc:
                detail = "; ".join(
                    cattrs.transform_error(exc, path=f"turns[{i}]", format_exception=_explain)
                )
                raise ScriptError(f"{source}: turn {i}: {detail}") from None
        return cls(parsed, delay=delay, name=f"scripted:{Path(source).name}")

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load a TOML or JSON script; raises ``ScriptError`` naming the file (and turn)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
            doc = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (OSError, ValueError) as exc:
            raise ScriptError(f"{path}: cannot read script: {exc}") from None
        turns = doc.get("turns")
        if not isinstance(turns, list) or not turns:
            raise ScriptError(f"{path}: a script needs a non-empty list of [[turns]]")
        delay = doc.get("delay_ms", 0)
        if not isinstance(delay, int | float) or delay < 0:
            raise ScriptError(f"{path}: delay_ms must be a non-negative number")
        return cls.from_turns(turns, delay=delay / 1000, source=str(path))

    def turn_index(self, messages: Sequence[Message]) -> int:
        """The turn that answers a request with ``messages`` (see the module docstring)."""
        k = 0
        for i, m in enumerate(messages):
            if m.role == "assistant" or (
                i > 0
                and messages[i - 1].role == "user"
                and len(m.tool_results) < len(m.content)  # a prompt, not only tool results
                and k < len(self.turns)
                and self.turns[k].empty
            ):
                k += 1
        return k

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        k = self.turn_index(request.messages)
        if k >= len(self.turns):
            raise ModelError(f"script exhausted after {len(self.turns)} turns")
        for event in self._events(k, self.turns[k]):
            if self.delay:
                await anyio.sleep(self.delay)
            yield event

    def _events(self, k: int, turn: ScriptedTurn) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        index = 0
        if turn.thinking is not None:
            events += [ThinkingDelta(index, p) for p in _chunks(turn.thinking.thinking, 3)]
            events.append(SignatureDelta(index, turn.thinking.signature))
            index += 1
        if turn.redacted_thinking is not None:
            events.append(RedactedThinking(index, turn.redacted_thinking))
            index += 1
        if turn.text:
            events += [TextDelta(index, p) for p in _chunks(turn.text, 4)]
            index += 1
        for j, call in enumerate(turn.tool_calls):
            arguments = json.dumps(call.input, ensure_ascii=False)
            third = max(1, len(arguments) // 3)
            events.append(ToolUseStart(index, call.id or f"toolu_scripted_{k}_{j}", call.name))
            events += [
                ToolInputDelta(index, arguments[i : i + third])
                for i in range(0, len(arguments), third)
            ]
            events.append(ToolUseStop(index))
            index += 1
        stop = turn.stop_reason or (StopReason.TOOL_USE if turn.tool_calls else StopReason.END_TURN)
        events.append(MessageStop(stop, turn.usage))
        return events
