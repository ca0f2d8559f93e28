"""``LimitsMiddleware`` (slot ``limits``): budgets on model calls, tool calls and tokens.

A ModelWrapper, a ToolWrapper and a RunHook. Before a call it checks every limit against the
counters; after the call completes it counts it (a model call with its tokens, a tool call
with its tool's name). The counters live in the middleware's private state, which the loop
saves with the call's message or result in one checkpoint, so a call is counted exactly when
its outcome is kept: a run killed mid-call counts that call once, when it is re-run after the
resume. The tool calls of a batch run concurrently, so a call that passed its check is kept as
running (by call id) until it completes: its siblings' checks count it, and a budget is never
overshot by calls that all started before any finished. The state is session-scoped: the
session's next run starts from it and resets only the run's own counters
(``LimitsState.start_run``).

Reaching a limit (the counter is already at its maximum when a call would start):

- ``continue`` (tool limits): the call is not executed; its error result tells the model.
- ``end``: the call is not executed, and neither is any call left in its batch (each gets an
  error result, so every tool_use is answered); the next model call is answered here, without
  the model, by a final assistant message naming the limit, so the run ends completed with a
  history the next message of the session can build on (the langchain#34159 bug).
- ``error``: ``LimitReached`` is raised; the run fails with the limit named.
- ``suspend`` (tool limits): the run is suspended (``req.interrupt``) for a person to decide:
  ``approve`` raises the limits the call reached, each by its configured size, and the call
  runs; ``reject`` refuses the call as ``continue`` does. Model-call and token limits cannot
  suspend: a run pauses only before a tool call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from typing import Final

import attrs
from attrs import define, field

from hango import Message, ModelResponse, StopReason, TextBlock, ToolResult, Usage, error_result
from hango.middleware import (
    REQUEST_REWRITTEN,
    SHORT_CIRCUITED,
    TOOL_NAME,
    ConfigError,
    Decision,
    ModelHandler,
    ModelRequest,
    State,
    ToolCallRequest,
    ToolHandler,
    load_private,
    record,
    store_private,
)
from hango_limits.policy import MODEL_COUNTERS, Limit, LimitPolicy, OnLimit

#: Span attribute naming the limit a call ran into (``run.tool_calls``).
LIMIT_ATTRIBUTE: Final = "hango.limit"


@define
class Counts:
    """What one scope has used: completed model calls and their tokens, completed tool calls
    and, per tool name, its completed calls. ``input_tokens`` counts every prompt token the
    provider processed, cached or not."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    per_tool: dict[str, int] = field(factory=dict)

    def used(self, limit: Limit) -> int:
        if limit.tool is not None:
            return self.per_tool.get(limit.tool, 0)
        value: int = getattr(self, limit.counter)
        return value

    def add_model_call(self, usage: Usage) -> None:
        self.model_calls += 1
        self.input_tokens += (
            usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        )
        self.output_tokens += usage.output_tokens

    def add_tool_call(self, name: str) -> None:
        self.tool_calls += 1
        self.per_tool[name] = self.per_tool.get(name, 0) + 1


@define
class LimitsState:
    """The private state, carried from run to run of a session: ``run_id``, the run the
    ``run`` counters belong to; the counters of that run and of the session (earlier runs
    included); ``ending``, the limit an ``end`` is under way for (set when a tool call reached
    it, cleared by the final message), so a run resumed in between still ends; ``raised``, what
    people added to a limit (by key) by approving a ``suspend``."""

    run_id: str = ""
    run: Counts = field(factory=Counts)
    session: Counts = field(factory=Counts)
    ending: str | None = None
    raised: dict[str, int] = field(factory=dict)
    running: dict[str, str] = field(factory=dict)

    def scope(self, limit: Limit) -> Counts:
        return self.run if limit.scope == "run" else self.session

    def used(self, limit: Limit, call_id: str | None = None) -> int:
        """What ``limit``'s scope has used, counting the tool calls running (other than
        ``call_id``, whose own earlier start a resumed run finds) as used."""
        used = self.scope(limit).used(limit)
        if limit.counter in MODEL_COUNTERS:
            return used
        return used + sum(
            1 for cid, name in self.running.items() if cid != call_id and limit.tool in (None, name)
        )

    def start_run(self, run_id: str) -> None:
        """Begin counting run ``run_id``: its counters, its pending end and the raises of
        run limits start afresh; the session's are kept."""
        self.run_id = run_id
        self.run = Counts()
        self.ending = None
        # Calls of an earlier run that never completed will not: that run is over.
        self.running = {}
        self.raised = {k: v for k, v in self.raised.items() if k.startswith("session.")}


class LimitReached(Exception):
    """A limit with ``on_limit``/``on_tool_limit = "error"`` was reached: the run fails.

    ``limit`` is the ``Limit``; the message names it and where it is set, for example
    ``limit reached: 20 model calls per run ([options.limits] run.model_calls)``.
    """

    def __init__(self, limit: Limit) -> None:
        super().__init__(f"limit reached: {limit.describe()} ([options.limits] {limit.key})")
        self.limit = limit


def session_history_counts(state: State) -> Counts:
    """The model and tool calls of the session's earlier runs, read from the history before
    this run's prompt (the last user message that is not only tool results): the start of the
    session's counts when its earlier runs left none (they ran without this plugin). Their
    tokens are not in the history, so they count from zero."""
    messages = state.messages
    start = len(messages)
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and len(m.tool_results) != len(m.content):
            start = i
            break
    earlier = messages[:start]
    names = Counter(use.name for m in earlier for use in m.tool_uses)
    return Counts(
        model_calls=sum(1 for m in earlier if m.role == "assistant"),
        tool_calls=sum(names.values()),
        per_tool=dict(names),
    )


class LimitsMiddleware:
    """Enforces ``policy`` on every model and tool call of a run."""

    name = "limits"
    # The private state goes on to the session's next run, which keeps the session counters.
    state_scope = "session"

    def __init__(self, policy: LimitPolicy, *, source: str = "limits") -> None:
        self.policy = policy
        self.source = source
        self._model_limits = tuple(lim for lim in policy.limits if lim.counter in MODEL_COUNTERS)
        self._tool_limits = tuple(lim for lim in policy.limits if lim.counter not in MODEL_COUNTERS)
        self._output_limits = tuple(lim for lim in policy.limits if lim.counter == "output_tokens")

    def check_tools(self, tools: Collection[str]) -> None:
        """Before a run is recorded: every ``per_tool`` limit names a tool of the run
        (``ConfigError`` naming the table and key otherwise: a typo must not leave the real
        tool unlimited)."""
        for lim in self.policy.limits:
            if lim.tool is not None and lim.tool not in tools:
                raise ConfigError(
                    f"{self.source}: {lim.key}: no tool {lim.tool!r} in this run "
                    f"(tools: {', '.join(sorted(tools)) or 'none'})"
                )

    def _load(self, state: State) -> LimitsState:
        counts, found = load_private(state, self.name, LimitsState)
        if not found:
            counts.session = session_history_counts(state)
        if counts.run_id != str(state.run_id):
            counts.start_run(str(state.run_id))
        return counts

    async def before_run(self, state: State) -> None:
        # A new run's counters are set up once, before its first call, and saved.
        store_private(state, self.name, self._load(state))

    # -- model calls -----------------------------------------------------------------------

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        counts = self._load(req.state)
        if counts.ending is not None:
            reason, counts.ending = counts.ending, None
            store_private(req.state, self.name, counts)
            record(SHORT_CIRCUITED, middleware=self.name, reason="run ended at a limit")
            return _final_message(reason)
        reached = _reached(self._model_limits, counts)
        if reached:
            return self._model_limit(reached[0])
        req = self._cap_output(req, counts)
        response = await next(req)
        if not isinstance(response, ModelResponse):
            return response  # a wrapper inside broke the contract: the chain names it, not us
        counts.run.add_model_call(response.usage)
        counts.session.add_model_call(response.usage)
        store_private(req.state, self.name, counts)
        return response

    def _model_limit(self, limit: Limit) -> ModelResponse:
        _record(limit)
        if self.policy.on_limit == "error":
            raise LimitReached(limit)
        return _final_message(limit.describe())

    def _cap_output(self, req: ModelRequest, counts: LimitsState) -> ModelRequest:
        """Lower ``max_tokens`` to what is left of the output-token limits, so one call cannot
        overshoot them."""
        if not self._output_limits:
            return req
        room = min(lim.maximum - counts.scope(lim).used(lim) for lim in self._output_limits)
        if room >= req.request.max_tokens:
            return req
        record(REQUEST_REWRITTEN, middleware=self.name, reason="max_tokens capped")
        return attrs.evolve(req, request=attrs.evolve(req.request, max_tokens=room))

    # -- tool calls ------------------------------------------------------------------------

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        name = req.call.name
        counts = self._load(req.state)
        if counts.ending is not None:
            return error_result(
                "Not executed: the limit of %s was reached; the run is ending.", counts.ending
            )
        call_id = req.call.id
        reached = _reached(
            (lim for lim in self._tool_limits if lim.tool in (None, name)), counts, call_id
        )
        if reached:
            refused = self._tool_limit(req, reached, counts)
            if refused is not None:
                return refused
        counts.running[call_id] = name
        store_private(req.state, self.name, counts)
        try:
            result = await next(req)
        except BaseException:
            # Not completed (cancelled, or a pause the loop undoes anyway): not counted.
            counts = self._load(req.state)
            counts.running.pop(call_id, None)
            store_private(req.state, self.name, counts)
            raise
        # Loaded again: the siblings that completed meanwhile stored their counts.
        counts = self._load(req.state)
        counts.running.pop(call_id, None)
        counts.run.add_tool_call(name)
        counts.session.add_tool_call(name)
        store_private(req.state, self.name, counts)
        return result

    def _tool_limit(
        self, req: ToolCallRequest, reached: list[Limit], counts: LimitsState
    ) -> ToolResult | None:
        """The refusal of a call that reached the ``reached`` limits (at least one), or None
        when a person raised them."""
        behaviour: OnLimit = self.policy.on_tool_limit
        limit, declined = reached[0], ""
        if behaviour == "suspend":
            decision = self._ask(req, reached)
            if decision.type == "approve":
                for lim in reached:
                    grown = counts.raised.get(lim.key, 0) + self.policy.maximum(lim.key)
                    counts.raised[lim.key] = grown
                store_private(req.state, self.name, counts)
                return None
            why = (decision.message or "").strip()
            declined = " and a person declined to raise it" + (f" ({why})" if why else "")
        _record(limit, tool=req.call.name)
        if behaviour == "error":
            raise LimitReached(limit)
        if behaviour == "end":
            counts.ending = limit.describe()
            store_private(req.state, self.name, counts)
            return error_result(
                "Not executed: the limit of %s was reached; the run is ending.", counts.ending
            )
        advice = (
            f"Do not call {limit.tool!r} again"
            if limit.tool is not None
            else "Do not call any more tools"
        )
        return error_result(
            "Not executed: the limit of %s was reached%s. %s; answer with what you have.",
            limit.describe(),
            declined,
            advice,
        )

    def _ask(self, req: ToolCallRequest, reached: list[Limit]) -> Decision:
        """A person's decision on raising every limit this call reached, asked once (one
        question per call: a call's questions are answered by its call id); the first time,
        the run is suspended (``Interrupt`` propagates)."""
        raises = [(lim, lim.maximum + self.policy.maximum(lim.key)) for lim in reached]
        if len(raises) == 1:
            ((lim, to),) = raises
            what = f"the limit of {lim.describe()} was reached; approve to raise it to {to}"
        else:
            what = (
                f"the limits of {' and '.join(lim.describe() for lim, _ in raises)} were "
                f"reached; approve to raise them to {' and '.join(str(to) for _, to in raises)}"
            )
        return req.interrupt(
            self.name,
            "raise " + ", ".join(lim.key for lim in reached),
            reason=f"{what} and run this call, reject to refuse the call",
            decisions=("approve", "reject"),
            request={
                "limits": [
                    {"limit": lim.key, "maximum": lim.maximum, "raise_to": to} for lim, to in raises
                ]
            },
        )


def _reached(
    limits: Iterable[Limit], counts: LimitsState, call_id: str | None = None
) -> list[Limit]:
    """Those of ``limits`` whose counter is at its maximum (as raised by people, when they
    did), each with that maximum; running tool calls other than ``call_id`` count."""
    out = []
    for lim in limits:
        maximum = lim.maximum + counts.raised.get(lim.key, 0)
        if counts.used(lim, call_id) >= maximum:
            out.append(lim if maximum == lim.maximum else attrs.evolve(lim, maximum=maximum))
    return out


def _final_message(reason: str) -> ModelResponse:
    """The run's last assistant message, made here instead of by the model."""
    text = f"I stopped here: the limit of {reason} was reached."
    return ModelResponse(Message("assistant", (TextBlock(text),)), StopReason.END_TURN, Usage())


def _record(limit: Limit, *, tool: str | None = None) -> None:
    attributes: dict[str, str] = {LIMIT_ATTRIBUTE: limit.key}
    if tool is not None:
        attributes[TOOL_NAME] = tool
    record(
        SHORT_CIRCUITED,
        middleware=LimitsMiddleware.name,
        reason="limit reached",
        attributes=attributes,
    )
