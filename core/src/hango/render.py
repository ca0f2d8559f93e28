"""Terminal rendering of a run's events (rich): streamed text, compact tool calls, the plan."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from hango.agent.events import (
    AttemptDiscarded,
    Event,
    InterruptRaised,
    MessageCompleted,
    RunFinished,
    RunStarted,
    RunStatus,
    TodosUpdated,
    ToolCallFinished,
    ToolCallStarted,
)
from hango.agent.state import Todo
from hango.agent.storable import replace_lone_surrogates
from hango.provider.events import ProviderRetry, TextDelta
from hango.provider.messages import Usage

# Tool lines stay one line at any terminal width.
_ONE_LINE: dict[str, Any] = {"no_wrap": True, "overflow": "ellipsis", "crop": True}

_MARKS = {"completed": ("[x]", "green"), "in_progress": ("[>]", "yellow"), "pending": ("[ ]", "")}


#: Characters of one text block that ``hango runs show`` prints (``--json`` prints all).
SHOW_TEXT_CHARS = 20_000


def clip_line(text: str, width: int = 200) -> str:
    """``text`` on one line (whitespace collapsed), at most ``width`` characters. Only the
    start of ``text`` is looked at, so a result of megabytes costs what a short one does. Lone
    surrogates become U+FFFD: a terminal cannot encode them, and printing must not fail a run."""
    line = replace_lone_surrogates(" ".join(text[: width * 4].split()))
    return line if len(line) <= width and len(text) <= width * 4 else line[: width - 1] + "…"


def clip_text(text: str, limit: int = SHOW_TEXT_CHARS) -> str:
    """``text`` up to ``limit`` characters, then a line counting the characters not shown."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit:,} more characters: --json shows them]"


def checklist(todos: Sequence[Todo]) -> Text:
    """The plan as a checklist, one line per todo."""
    out = Text()
    done = sum(t.status == "completed" for t in todos)
    out.append(f"Plan ({done}/{len(todos)} done)\n", style="bold")
    for t in todos:
        mark, style = _MARKS[t.status]
        out.append(f"  {mark} {replace_lone_surrogates(t.content)}\n", style=style)
    return out


def retry_line(retry: ProviderRetry) -> str:
    """One line: provider, what failed (HTTP status or no response), the retry and its wait, and
    the error, e.g. ``openai: HTTP 503, retry 1 of 4 in 1 s: server_error (HTTP 503): busy``."""
    status = "no response" if retry.status is None else f"HTTP {retry.status}"
    detail = retry.error.removeprefix(f"{retry.provider}: ").removeprefix(f"{retry.provider} ")
    return (
        f"{retry.provider}: {status}, retry {retry.attempt} of {retry.max_retries} "
        f"in {retry.wait_seconds:g} s: {clip_line(detail)}"
    )


def usage_text(usage: Usage) -> str:
    """Token counts, saying when some calls' usage was not reported (then a lower bound)."""
    if usage.known:
        return f"{usage.input_tokens} in / {usage.output_tokens} out tokens"
    if not (usage.input_tokens or usage.output_tokens):
        return "usage not reported by the server"
    return (
        f"at least {usage.input_tokens} in / {usage.output_tokens} out tokens; "
        f"{usage.unknown_calls} calls' usage not reported"
    )


class Renderer:
    """Prints events as they arrive; call ``event`` for each."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._in_text = False

    def _end_text(self) -> None:
        if self._in_text:
            self.console.print()
            self._in_text = False

    async def event(self, event: Event) -> None:
        c = self.console
        match event:
            case RunStarted(run_id=run_id, resumed=resumed):
                verb = "resuming" if resumed else "run"
                c.print(Text(f"{verb} {run_id}", style="dim"))
            case TextDelta(text=text):
                c.print(
                    replace_lone_surrogates(text),
                    end="",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
                self._in_text = True
            case AttemptDiscarded():
                # A terminal cannot take back what it printed: say it does not count.
                if self._in_text:
                    self._end_text()
                    c.print(Text("(discarded: the model call was tried again)", style="dim"))
            case ProviderRetry():
                self._end_text()
                c.print(Text(retry_line(event), style="dim"), **_ONE_LINE)
            case MessageCompleted(message=message):
                if not self._in_text and message.text:
                    # A message no model streamed (a middleware's own answer, e.g. a limit's).
                    c.print(replace_lone_surrogates(message.text), markup=False, highlight=False)
                self._end_text()
            case ToolCallStarted(call=call):
                self._end_text()
                args = (
                    json.dumps(call.input, ensure_ascii=False)
                    if isinstance(call.input, dict)
                    else repr(call.input)
                )
                c.print(Text(f"→ {call.name} {clip_line(args)}", style="cyan"), **_ONE_LINE)
            case ToolCallFinished(result=result):
                style = "red" if result.is_error else "dim"
                prefix = "  ✗ " if result.is_error else "  ← "
                c.print(Text(prefix + clip_line(result.content), style=style), **_ONE_LINE)
            case InterruptRaised(action=action):
                self._end_text()
                line = f"  ⏸ waiting for a person: {action.reason} ({action.tool_call_id})"
                c.print(Text(line, style="yellow"), **_ONE_LINE)
            case TodosUpdated(todos=todos):
                c.print(checklist(todos))
            case RunFinished(status=status, error=error, usage=usage, pending=pending):
                self._end_text()
                style = {RunStatus.COMPLETED: "green", RunStatus.SUSPENDED: "yellow"}.get(
                    status, "red"
                )
                tail = f": {error}" if error else ""
                if pending:
                    tail = f": waiting for a decision on {len(pending)} tool call(s)"
                c.print(Text(f"{status.value}{tail} ({usage_text(usage)})", style=style))
