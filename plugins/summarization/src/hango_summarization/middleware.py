"""``SummarizationMiddleware`` (slot ``summarization``): compacts what a model call sees.

A ModelWrapper. Before each of the agent's model calls it estimates the request's input
tokens: the last call's provider-reported input plus an estimate of the messages added since
(``hango_summarization.history``). Above the trigger:

1. tier 1 replaces the content of old tool results (all but the latest ``keep_tool_results``)
   with a placeholder naming the tool and the call;
2. if that is not enough, tier 2 summarizes the oldest messages with the summarizer model,
   keeping ``keep_tokens`` (or ``keep_messages``) of the latest history verbatim.

What it decides is one record in its private state (``SummarizationState``), session-scoped:
the covered range, the summary, the summarizer, tokens before and after, tier and version.
The view a request carries is built from that record and the history on every call, so the
messages table stays append-only and a resumed run sends byte-identical requests. A summary
is saved (``ModelRequest.save``) before the compacted call is sent, and the history mark is
moved to the end of the covered range (``mark_history``), so a later run of the session loads
only the messages after it.

The summary call goes through the rest of the chain (``purpose="summary"``): repair checks it,
limits count it, the prompt cache marks it. It reuses the request's system blocks and tools and
the view's messages up to the cut, with the summary instruction added to the last of them, so
its prefix is what an earlier call of the run already sent (a prompt-cache hit on Anthropic).
When the part to summarize does not fit the summarizer's window it is summarized in chunks
that do, each summary carried into the next (a summary of summaries), so the summarizer sees
all of it.

No loops: a compaction that would reclaim less than ``min_reclaim`` of the request does not
run; after ``MAX_SUMMARY_FAILURES`` failed summary calls in a run it stops trying and drops the
oldest messages instead (tier ``window``); a provider's "context too long" answer triggers one
compaction and one retry of that call, never more.
"""

from __future__ import annotations

from typing import Final

import attrs
from attrs import define, frozen

from hango import (
    ContextCompacted,
    Message,
    Model,
    ModelError,
    ModelResponse,
    Request,
)
from hango.middleware import (
    ModelHandler,
    ModelRequest,
    State,
    load_private,
    mark_history,
    record,
    store_private,
)
from hango_summarization import history
from hango_summarization.windows import context_window

#: Span event of a compaction: tier, tokens before and after, messages covered (no content).
CONTEXT_COMPACTED: Final = "middleware.context_compacted"
#: Span event when the summaries failed and the run falls back to dropping old messages.
SUMMARY_FAILED: Final = "middleware.summary_failed"
TIER: Final = "hango.summarization.tier"
TOKENS_BEFORE: Final = "hango.summarization.tokens_before"
TOKENS_AFTER: Final = "hango.summarization.tokens_after"
MESSAGES_COVERED: Final = "hango.summarization.messages_covered"

#: How the note of a sliding window (tier ``window``) begins.
DROPPED: Final = "\n\n(Later messages, up to message "
#: Failed summary calls in one run after which it stops trying.
MAX_SUMMARY_FAILURES: Final = 3
#: Version of the compaction record.
RECORD_VERSION: Final = 1

#: The summary instruction: the last block of a summary request. It starts with the tag
#: hango's scripted model answers with a summary of its own.
INSTRUCTION: Final = """<summarize>
Stop here and write a summary of the conversation above instead of continuing it. The summary
replaces those messages: you will continue the task from it and from the messages that come
after them, so keep everything needed to do so:
- the user's requests and the goal of the task, and what is done and what is left;
- the decisions made and why, and the open questions;
- every file path, identifier and value still needed, and the tool results still needed
  (quote the parts that matter);
- the content of any earlier summary at the start of the conversation, folded in.
Do not call tools. Reply with the summary only.
</summarize>"""

_TOO_LONG = (
    "prompt is too long",
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "too many tokens",
)


@frozen
class Compaction:
    """One compaction of the session's history, as persisted.

    ``start`` .. ``end`` is the covered range of session indices (``end`` exclusive; ``start``
    is 1 when the goal, the session's first message, stays verbatim); ``summary`` replaces
    those messages (earlier compactions folded in); ``goal`` is the first message's text when
    it is kept. ``model`` is the summarizer, ``tokens_before`` / ``tokens_after`` the
    request's estimated input tokens, ``tier`` ``"summary"`` or ``"window"``, ``number`` the
    session's count of compactions, ``version`` the record's format."""

    start: int
    end: int
    summary: str
    model: str
    tokens_before: int
    tokens_after: int
    tier: str = "summary"
    goal: str | None = None
    number: int = 1
    version: int = RECORD_VERSION


@define
class SummarizationState:
    """The private state (session-scoped). ``compaction`` is the latest record (None: none
    yet); ``cleared_before`` the session index before which tool results are cleared (tier
    1); ``reported_tokens`` the input tokens the provider reported for the last call, whose
    history ended at session index ``reported_end`` and whose view was ``reported_view``;
    ``run_id`` / ``failures`` the failed summary calls of that run; ``retried_turn`` the turn
    (history length) whose "too long" error was already answered with a compaction."""

    compaction: Compaction | None = None
    cleared_before: int = 0
    reported_tokens: int = 0
    reported_end: int = 0
    reported_view: str = ""
    run_id: str = ""
    failures: int = 0
    retried_turn: int = -1


@frozen
class Settings:
    """Validated settings (see ``hango_summarization.OPTIONS_SCHEMA``)."""

    trigger: float = 0.85
    trigger_tokens: int | None = None
    keep_tokens: int | None = None
    keep_messages: int | None = None
    model: str | None = None
    context_window: int | None = None
    clear_tool_results: bool = True
    keep_tool_results: int = 3
    exclude_tools: tuple[str, ...] = ()
    keep_goal: bool = True
    min_reclaim: float = 0.1


def too_long(error: ModelError) -> bool:
    """Whether ``error`` is a provider's "the prompt does not fit" (Anthropic's 400 "prompt is
    too long", OpenAI's ``context_length_exceeded``)."""
    text = str(error).lower()
    return error.status in (400, 413, None) and any(t in text for t in _TOO_LONG)


class SummarizationMiddleware:
    """Compacts long histories per call; ``settings`` as validated from
    ``[options.summarization]``. ``summarizer`` is the model for summaries (the hook builds
    it from the ``model`` setting's spec; default: the run's model)."""

    name = "summarization"
    # The record belongs to the session: the next run goes on from the last compaction.
    state_scope = "session"

    def __init__(self, settings: Settings | None = None, *, summarizer: Model | None = None):
        self.settings = settings or Settings()
        self._summarizer = summarizer
        self._decoded: tuple[object, SummarizationState] | None = None

    # -- thresholds, per model -----------------------------------------------------------

    def window(self, model: object) -> int:
        """The run's model's window: ``context_window`` when set, else the table's."""
        return self.settings.context_window or context_window(model)

    def summarizer_window(self, req: ModelRequest, summarizer: object) -> int:
        """The summarizer's window: the run's when it is the run's model, else the table's."""
        return self.window(req.model) if summarizer is req.model else context_window(summarizer)

    def trigger(self, model: object) -> int:
        s = self.settings
        return s.trigger_tokens or int(self.window(model) * s.trigger)

    def keep(self, model: object) -> int:
        return self.settings.keep_tokens or max(1, self.window(model) // 10)

    def summarizer(self, req: ModelRequest) -> Model | None:
        """The summarizer: the one given, else the run's model."""
        return self._summarizer or req.model

    # -- the call ------------------------------------------------------------------------

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        if req.purpose != "turn":
            return await next(req)
        state = req.state
        st = self._load(state)
        if st.run_id != str(state.run_id):
            st.run_id, st.failures = str(state.run_id), 0
        request = self.view(st, state, req.request)
        estimate = self.estimate(st, state, request)
        if estimate > self.trigger(req.model):
            compacted = await self.compact(st, req, next, request, estimate, forced=False)
            if compacted is not request:
                request, estimate = compacted, self.estimate(st, state, compacted)
        try:
            response = await next(
                req if request is req.request else attrs.evolve(req, request=request)
            )
        except ModelError as exc:
            end = state.history_start + len(state.messages)
            if not too_long(exc) or st.retried_turn == end:
                raise
            # One compaction and one retry of this call, never more.
            st.retried_turn = end
            estimate = max(self.estimate(st, state, request), self.trigger(req.model) + 1)
            retry = await self.compact(st, req, next, request, estimate, forced=True)
            if retry is request:
                store_private(state, self.name, st)
                raise
            request, estimate = retry, self.estimate(st, state, retry)
            response = await next(attrs.evolve(req, request=request))
        if isinstance(response, ModelResponse):  # else the chain names the layer at fault
            self.reported(st, state, response, estimate)
        store_private(state, self.name, st)
        self._decoded = (state.private[self.name], st)
        return response

    def _load(self, state: State) -> SummarizationState:
        """The private state, typed. The value this middleware stored at the end of its last
        call is kept decoded, keyed by the very JSON object it stored: a run's next call finds
        that object in its state and skips decoding it again (a call in another run, or after
        a resume, finds another object and decodes its own). A call that did not end keeps
        nothing, so what it changed is never reused."""
        raw = state.private.get(self.name)
        decoded, self._decoded = self._decoded, None
        if decoded is not None and raw is decoded[0]:
            return decoded[1]
        st, _ = load_private(state, self.name, SummarizationState)
        return st

    def reported(
        self, st: SummarizationState, state: State, response: ModelResponse, estimate: int
    ) -> None:
        """Keep the input tokens of the call just made: the provider's count, or ``estimate``
        when it reported none (a scripted model), so the next call adds only its new part."""
        u = response.usage
        st.reported_tokens = (
            u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
        ) or estimate
        st.reported_end = state.history_start + len(state.messages)
        st.reported_view = self.view_key(st)

    @staticmethod
    def view_key(st: SummarizationState) -> str:
        number = st.compaction.number if st.compaction else 0
        return f"{number}:{st.cleared_before}"

    def estimate(self, st: SummarizationState, state: State, request: Request) -> int:
        """The request's input tokens: the last reported count plus the messages added since,
        when the view is the one reported on; else an estimate of the whole request."""
        end = state.history_start + len(state.messages)
        if st.reported_tokens and st.reported_view == self.view_key(st) and st.reported_end <= end:
            since = state.messages[st.reported_end - state.history_start :]
            return st.reported_tokens + history.tokens(since)
        return fixed_tokens(request) + history.tokens(request.messages)

    # -- the view ------------------------------------------------------------------------

    def view(self, st: SummarizationState, state: State, request: Request) -> Request:
        """``request`` with the compacted view of the history: the record's head, then the
        history after the covered range, tool results before ``cleared_before`` replaced. The
        request itself when nothing is compacted."""
        c = st.compaction
        base = state.history_start
        if c is None and st.cleared_before <= base:
            return request
        start = 0 if c is None else c.end - base
        messages = self._tail(st, state, start)
        if c is not None:
            messages.insert(0, history.head(c.goal, c.summary, c.end - c.start))
        return attrs.evolve(request, messages=tuple(messages))

    def _tail(
        self, st: SummarizationState, state: State, start: int, end: int | None = None
    ) -> list[Message]:
        """``messages[start:end]`` as sent: cleared tool results, blank blocks dropped."""
        base = state.history_start
        msgs = state.messages
        end = len(msgs) if end is None else end
        clear_upto = st.cleared_before - base
        names: dict[str, str] = {}
        if clear_upto > start:
            for m in msgs[max(0, start - 1) : clear_upto]:
                for use in m.tool_uses:
                    names[use.id] = use.name
        exclude = frozenset(self.settings.exclude_tools)
        out: list[Message] = []
        for i in range(start, end):
            m = msgs[i]
            if i < clear_upto:
                m = history.cleared(m, names, exclude)
            sent = history.sendable(m)
            if sent is not None:
                out.append(sent)
        return out

    # -- compaction ----------------------------------------------------------------------

    async def compact(
        self,
        st: SummarizationState,
        req: ModelRequest,
        next: ModelHandler,
        request: Request,
        before: int,
        *,
        forced: bool,
    ) -> Request:
        """The request compacted: tier 1 first, tier 2 when tier 1 is not enough. Returns
        ``request`` itself when nothing worth doing could be done."""
        state = req.state
        trigger = self.trigger(req.model)
        least = 0 if forced else int(before * self.settings.min_reclaim)
        if self.settings.clear_tool_results:
            previous = st.cleared_before
            if self.clear_tool_results(st, state):
                candidate = self.view(st, state, request)
                after = self.estimate(st, state, candidate)
                if before - after < max(least, 1):
                    st.cleared_before = previous  # not worth a cache miss
                elif after <= trigger and not forced:
                    store_private(state, self.name, st)
                    await self.finished(req, "tool_results", before, after, 0)
                    return candidate
                else:
                    request = candidate
        return await self.summarize(st, req, next, request, before, least)

    def clear_tool_results(self, st: SummarizationState, state: State) -> bool:
        """Move ``cleared_before`` so only the latest ``keep_tool_results`` results are kept
        in full; False when that clears nothing new."""
        base = state.history_start
        count = 0
        for i in range(len(state.messages) - 1, -1, -1):
            count += len(state.messages[i].tool_results)
            if count > self.settings.keep_tool_results:
                boundary = base + i + 1
                if boundary <= st.cleared_before:
                    return False
                st.cleared_before = boundary
                return True
        return False

    async def summarize(
        self,
        st: SummarizationState,
        req: ModelRequest,
        next: ModelHandler,
        request: Request,
        before: int,
        least: int,
    ) -> Request:
        state = req.state
        base = state.history_start
        msgs = state.messages
        c = st.compaction
        if c is None and base != 0:
            return request  # without a record the history is loaded whole: never here
        first = c.end if c is not None else (1 if self.settings.keep_goal else 0)
        start = first - base
        goal = c.goal if c is not None else None
        if c is None and self.settings.keep_goal and msgs:
            goal = history.goal_text(msgs[0])
        k = self.cut(state, start, self.keep(req.model), self.settings.keep_messages)
        if k is None:
            return request
        kept = self._tail(st, state, k)
        reclaimed = (
            before - history.tokens(kept) - history.message_tokens(history.head(goal, "", 0))
        )
        if reclaimed < least:
            return request
        summarizer = self.summarizer(req)
        summary = None
        if st.failures < MAX_SUMMARY_FAILURES:
            summary = await self.summary_text(st, req, next, request, start, k, goal, summarizer)
        if summary is not None:
            tier = "summary"
        elif st.failures < MAX_SUMMARY_FAILURES:
            store_private(state, self.name, st)
            return request
        else:
            record(SUMMARY_FAILED, middleware=self.name, reason="summary calls failed")
            # The last real summary stays; one note says how far the window has moved.
            earlier = c.summary.split(DROPPED)[0] if c is not None else ""
            summary = f"{earlier}{DROPPED}{base + k - 1} were dropped: summarizing them failed.)"
            tier = "window"
        new = Compaction(
            start=c.start if c is not None else first,
            end=base + k,
            summary=summary,
            model=model_name(summarizer),
            tokens_before=before,
            tokens_after=0,
            tier=tier,
            goal=goal,
            number=(c.number + 1) if c is not None else 1,
        )
        st.compaction = new
        compacted = self.view(st, state, request)
        after = self.estimate(st, state, compacted)
        st.compaction = attrs.evolve(new, tokens_after=after)
        mark_history(
            state,
            new.end,
            by=self.name,
            note=(
                f"messages {new.start}-{new.end - 1} compacted ({tier}, "
                f"{before} -> {after} tokens):\n{summary}"
            ),
        )
        store_private(state, self.name, st)
        # Saved before the compacted call is sent: a run killed from here on never pays for
        # this summary again, and its resumed run sends this same request.
        await req.save()
        await self.finished(req, tier, before, after, new.end - new.start)
        return compacted

    @staticmethod
    def cut(state: State, start: int, keep: int, keep_messages: int | None) -> int | None:
        """Where to cut: the earliest cut point after ``start`` whose kept part fits ``keep``
        tokens (or ``keep_messages`` messages), else the latest one; None when there is no
        cut point after ``start``."""
        msgs = state.messages
        points = [k for k in history.cut_points(msgs) if k > start]
        if not points:
            return None
        if keep_messages is not None:
            fitting = [k for k in points if len(msgs) - k <= keep_messages]
            return fitting[0] if fitting else points[-1]
        kept = 0
        for i in range(len(msgs) - 1, points[0] - 1, -1):
            kept += history.message_tokens(msgs[i])
            if kept > keep:
                later = [k for k in points if k > i]
                return later[0] if later else points[-1]
        return points[0]

    def chunks(
        self, st: SummarizationState, state: State, start: int, k: int, budget: int
    ) -> list[tuple[int, int]]:
        """``start`` .. ``k`` in ranges between cut points, each within ``budget`` tokens
        where the cut points allow (a range that is one long turn is kept whole)."""
        points = [p for p in history.cut_points(state.messages) if start < p < k] + [k]
        out: list[tuple[int, int]] = []
        a = start
        size = 0
        prev = start
        for p in points:
            part = history.tokens(self._tail(st, state, prev, p))
            if size and size + part > budget:
                out.append((a, prev))
                a, size = prev, 0
            size += part
            prev = p
        out.append((a, k))
        return out

    async def summary_text(
        self,
        st: SummarizationState,
        req: ModelRequest,
        next: ModelHandler,
        request: Request,
        start: int,
        k: int,
        goal: str | None,
        summarizer: Model | None,
    ) -> str | None:
        """The summary of messages ``start`` .. ``k`` with the earlier summary folded in, or
        None when a summary call failed (counted in ``st.failures``)."""
        state = req.state
        c = st.compaction
        summary = c.summary if c is not None else None
        covered = (c.end - c.start) if c is not None else 0
        # What the summarizer's window holds besides the part: the prefix, the instruction
        # and the answer. The part up to the cut is smaller than the request being compacted,
        # which the run's own model holds, so with that model it is one chunk unless the
        # request is at the very edge of the window.
        window = self.summarizer_window(req, summarizer)
        answer = min(request.max_tokens, window // 16)
        budget = max(1, window - answer - fixed_tokens(request) - len(INSTRUCTION) // 3)
        for a, b in self.chunks(st, state, start, k, budget):
            if summary is None:
                # The view itself up to the cut: the prefix an earlier call sent.
                messages = self._tail(st, state, 0, b)
            else:
                messages = [history.head(goal, summary, covered), *self._tail(st, state, a, b)]
            # The answer is prose: no structured output for it (the prefix is the same).
            ask = attrs.evolve(
                request,
                messages=tuple(history.with_instruction(messages, INSTRUCTION)),
                output=None,
            )
            sreq = attrs.evolve(req, request=ask, purpose="summary")
            if summarizer is not req.model:
                sreq = attrs.evolve(sreq, model=summarizer)
            try:
                response = await next(sreq)
            except ModelError:
                st.failures += 1
                return None
            # The summary's tokens are the run's, as any call's.
            state.usage += response.usage
            text = response.message.text.strip()
            if not text:
                st.failures += 1
                return None
            summary = text
            covered += b - a
        return summary

    async def finished(
        self, req: ModelRequest, tier: str, before: int, after: int, covered: int
    ) -> None:
        record(
            CONTEXT_COMPACTED,
            middleware=self.name,
            attributes={
                TIER: tier,
                TOKENS_BEFORE: before,
                TOKENS_AFTER: after,
                MESSAGES_COVERED: covered,
            },
        )
        await req.emit(ContextCompacted(tier, before, after, covered))


def fixed_tokens(request: Request) -> int:
    """An estimate of the tokens of ``request``'s system blocks and tools."""
    chars = sum(len(b.text) for b in request.system) + sum(
        len(t.description) + len(str(t.input_schema)) + len(t.name) for t in request.tools
    )
    return chars // history.CHARS_PER_TOKEN


def model_name(model: object) -> str:
    name = getattr(model, "name", None)
    return name if isinstance(name, str) and name else type(model).__name__
