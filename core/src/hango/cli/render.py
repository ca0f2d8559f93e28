"""Terminal rendering of a run's events (rich).

On a terminal the renderer is live: answers render as Markdown (streamed text shows its newest
lines while it arrives, then the whole message renders in place), the plan is a checklist kept
at the bottom of the screen and updated in place (rich ``Live``), and a tool that runs for a
while shows a spinner with its elapsed time. Finished lines (tool calls, their results, notes)
print above that live area. Anywhere else (a pipe, a file, a dumb terminal) the output is plain
lines in order: streamed text as it arrives, one line per plan change, the plan once at the end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import anyio
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.spinner import Spinner
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
from hango.provider.messages import ToolUseBlock, Usage

# A line that never wraps: cut at the terminal's width with an ellipsis.
_ONE_LINE: dict[str, Any] = {"no_wrap": True, "overflow": "ellipsis", "crop": True}

_MARKS = {"completed": ("[x]", "green"), "in_progress": ("[>]", "yellow"), "pending": ("[ ]", "")}

#: Lines of a tool result shown under its call; the rest is counted, not shown.
RESULT_LINES = 4
#: A tool running longer than this (seconds) gets a spinner; its result line, the time taken.
SLOW_TOOL = 1.0

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


def first_lines(text: str, limit: int = RESULT_LINES, width: int = 200) -> list[str]:
    """The first ``limit`` non-blank lines of ``text``, each clipped to ``width``; when lines
    are left out, a last line says how many (``… 12 more lines``)."""
    lines = [replace_lone_surrogates(line.rstrip()) for line in text.splitlines() if line.strip()]
    shown = [line if len(line) <= width else line[: width - 1] + "…" for line in lines[:limit]]
    if len(lines) > limit:
        rest = len(lines) - limit
        shown.append(f"… {rest} more line{'s' if rest != 1 else ''}")
    return shown or [""]


def checklist(todos: Sequence[Todo]) -> Text:
    """The plan as a checklist: a ``Plan (2/4 done)`` heading, then one line per todo."""
    out = Text()
    done = sum(t.status == "completed" for t in todos)
    out.append(f"Plan ({done}/{len(todos)} done)", style="bold")
    for t in todos:
        mark, style = _MARKS[t.status]
        out.append(f"\n  {mark} {replace_lone_surrogates(t.content)}", style=style)
    return out


def plan_progress(todos: Sequence[Todo]) -> str:
    """One line for a plan change: ``plan 1/4 done; now: Read the limits``."""
    done = sum(t.status == "completed" for t in todos)
    active = next((t.content for t in todos if t.status == "in_progress"), None)
    tail = f"; now: {active}" if active else ""
    return f"plan {done}/{len(todos)} done{tail}"


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


def tool_call_line(call: ToolUseBlock) -> Text:
    """``→ read_file {"path": "a.md"}``: the call and its arguments, on one line."""
    args = (
        json.dumps(call.input, ensure_ascii=False)
        if isinstance(call.input, dict)
        else repr(call.input)
    )
    return Text(f"→ {call.name} {clip_line(args)}", style="cyan")


def tool_result_lines(content: str, is_error: bool, took: float | None = None) -> list[Text]:
    """A tool result under its call: ``  ← first line`` then up to ``RESULT_LINES`` lines in
    all (``✗`` and red for an error), and the time taken when given."""
    style = "red" if is_error else "dim"
    lines = first_lines(content)
    if took is not None:
        lines[-1] += f"  ({took:.1f} s)"
    head = "  ✗ " if is_error else "  ← "
    return [Text((head if i == 0 else "    ") + line, style=style) for i, line in enumerate(lines)]


class _Tail:
    """The last ``height`` lines of a renderable: streamed text longer than the screen keeps its
    newest lines in view (a live area taller than the terminal cannot be redrawn)."""

    def __init__(self, renderable: RenderableType, height: int) -> None:
        self.renderable = renderable
        self.height = height

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        for line in lines[-self.height :]:
            yield from line
            yield Segment.line()


class _Running:
    """``⠋ list_files  3.2 s``: a spinner and the elapsed time of a running tool, drawn only
    once it has run ``SLOW_TOOL`` seconds (a quick call would only flicker)."""

    def __init__(self, name: str) -> None:
        self.started = time.monotonic()
        self.spinner = Spinner("dots", style="cyan")
        self.name = name

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        elapsed = self.elapsed()
        if elapsed < SLOW_TOOL:
            return
        self.spinner.update(text=Text(f"{self.name}  {elapsed:.1f} s", style="dim"))
        yield self.spinner


class Renderer:
    """Prints a run's events as they arrive: ``await renderer.event(e)`` for each, inside
    ``with renderer:`` (which starts and stops the live area on a terminal), with ``animate``
    running in a task alongside to redraw the live area (the spinner's clock).

    ``live`` defaults to whether ``console`` is a real, capable terminal. Everything is drawn
    from the event loop's thread: rich's own refresh thread would race the printing of
    finished lines and leave stale copies of the live area on the screen.
    """

    def __init__(self, console: Console, *, live: bool | None = None) -> None:
        self.console = console
        self.live = (console.is_terminal and not console.is_dumb_terminal) if live is None else live
        self._live: Live | None = None
        self._text = ""  # the text block being streamed
        self._todos: tuple[Todo, ...] = ()
        self._plan_shown = False  # the plan was printed in full (it then leaves the live area)
        # The calls running now, by call id: a batch's calls run at once, each its spinner.
        self._running: dict[str, _Running] = {}
        self._concurrent = False  # the last result finished while a sibling still ran

    # -- the live area ---------------------------------------------------------------------

    def __enter__(self) -> Renderer:
        if self.live:
            self._live = Live(
                self._area(), console=self.console, auto_refresh=False, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Cut short (Ctrl-C, an error): keep what streamed, drop the spinner, leave the plan.
        self._end_text()
        self._running.clear()
        if self._live is None:
            self._show_plan()
        if self._live is not None:
            self._live.update(self._area(), refresh=True)
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    def _area(self) -> RenderableType:
        parts: list[RenderableType] = []
        if self._text:
            reserve = len(self._todos) + 3 if self._todos and not self._plan_shown else 2
            height = max(3, self.console.size.height - reserve)
            parts.append(_Tail(Markdown(self._text), height))
        parts.extend(self._running.values())
        if self._todos and not self._plan_shown:
            parts.append(checklist(self._todos))
        return Group(*parts)

    def _refresh(self, *, draw: bool = True) -> None:
        """Set the live area's content and draw it. Streamed text sets it without drawing:
        ``animate`` draws it at most 10 times a second, so a fast stream does not re-render its
        markdown on every piece. (rich prints finished lines above the area as last drawn, so
        any other change is drawn at once.)"""
        if self._live is not None:
            self._live.update(self._area(), refresh=draw)

    async def animate(self, interval: float = 0.1) -> None:
        """Redraw the live area every ``interval`` seconds until cancelled (no-op when not
        live)."""
        while self._live is not None:
            self._live.refresh()
            await anyio.sleep(interval)

    # -- output ----------------------------------------------------------------------------

    def note(self, text: str, style: str = "dim") -> None:
        """Print one finished line (above the live area on a terminal); provider retries and
        other passing remarks use it."""
        self._end_text()
        self._print(Text(text, style=style), **_ONE_LINE)

    def _print(self, *renderables: RenderableType, **kwargs: Any) -> None:
        self.console.print(*renderables, **kwargs)

    def _end_text(self) -> None:
        """Finish the streamed text block: rendered as Markdown on a terminal (replacing its
        streamed tail), a line break after the raw text elsewhere."""
        if not self._text:
            return
        text, self._text = self._text, ""
        if self._live is not None:
            self._refresh()
            self._print(Markdown(text))
        else:
            self.console.print()

    def _show_plan(self) -> None:
        """Print the whole plan once, where the answer follows it; it leaves the live area."""
        if self._todos and not self._plan_shown:
            self._plan_shown = True
            self._refresh()
            self._print(checklist(self._todos))

    def _lines(self, lines: Iterable[Text]) -> None:
        for line in lines:
            self._print(line, **_ONE_LINE)

    async def event(self, event: Event) -> None:
        c = self.console
        match event:
            case RunStarted(run_id=run_id, resumed=resumed):
                verb = "resuming" if resumed else "run"
                self._print(Text(f"{verb} {run_id}", style="dim"))
            case TextDelta(text=text):
                text = replace_lone_surrogates(text)
                if self._live is not None:
                    self._text += text
                    self._refresh(draw=False)
                else:
                    c.print(text, end="", markup=False, highlight=False, soft_wrap=True)
                    self._text += text
            case AttemptDiscarded():
                if self._live is not None:
                    # Not yet printed: the retried call's text simply replaces it.
                    self._text = ""
                    self._refresh()
                elif self._text:
                    # A pipe cannot take back what it printed: say it does not count.
                    self._end_text()
                    self._print(Text("(discarded: the model call was tried again)", style="dim"))
            case ProviderRetry():
                self.note(retry_line(event))
            case MessageCompleted(message=message):
                if not self._text and message.text:
                    # A message no model streamed (a middleware's own answer, e.g. a limit's).
                    await self.event(TextDelta(0, message.text))
                if not message.tool_uses and self._live is not None:
                    # The answer: the plan goes above it, so the answer is what is read last.
                    self._show_plan()
                self._end_text()
            case ToolCallStarted(call=call):
                self._end_text()
                self._print(tool_call_line(call), **_ONE_LINE)
                self._running[call.id] = _Running(call.name)
                self._refresh()
            case ToolCallFinished(call=call, result=result):
                running = self._running.pop(call.id, None)
                took = running.elapsed() if running is not None else None
                self._refresh()
                slow = took if took is not None and took >= SLOW_TOOL else None
                if self._running or self._concurrent:
                    # Calls overlap: a result says whose it is (their lines interleave).
                    self._concurrent = bool(self._running)
                    self._print(Text(f"  ← {call.name} ({call.id})", style="dim"), **_ONE_LINE)
                self._lines(tool_result_lines(result.content, result.is_error, slow))
            case InterruptRaised(action=action):
                self.note(
                    f"  ⏸ waiting for a person: {action.reason} ({action.tool_call_id})",
                    style="yellow",
                )
            case TodosUpdated(todos=todos):
                self._todos = todos
                self._plan_shown = False
                if self._live is not None:
                    self._refresh()
                else:
                    self._print(Text(plan_progress(todos), style="yellow"), **_ONE_LINE)
            case RunFinished(status=status, error=error, usage=usage, pending=pending):
                self._end_text()
                self._show_plan()
                style = {RunStatus.COMPLETED: "green", RunStatus.SUSPENDED: "yellow"}.get(
                    status, "red"
                )
                tail = f": {error}" if error else ""
                if pending:
                    tail = f": waiting for a decision on {len(pending)} tool call(s)"
                self._print(Text(f"{status.value}{tail} ({usage_text(usage)})", style=style))
            # Provider stream events other than text (tool input pieces, thinking, the
            # message stop) are not shown.
