"""The middleware contract: a marker protocol plus five optional capability protocols.

A middleware is any object with a ``name``. What it can do is discovered ONCE, when the chain
is built, by checking its class against these runtime-checkable protocols (so a capability is
a method of the class, not an attribute set on one instance):

- ``ModelWrapper``: ``async wrap_model_call(req: ModelRequest, next: ModelHandler)``
  returns ``ModelResponse``
- ``ToolWrapper``: ``async wrap_tool_call(req: ToolCallRequest, next: ToolHandler)``
  returns ``ToolResult``
- ``RunHook``: ``async before_run(state: State) -> None``
- ``ToolProvider``: ``provide_tools(state: State) -> Sequence[Tool]``
- ``PromptContributor``: ``system_blocks(state: State) -> Sequence[TextBlock]``

Wrappers form an onion (index 0 outermost). A wrapper may call ``next`` once (pass through,
possibly with a request rewritten by ``attrs.evolve``), more than once (retry) or never
(short-circuit). Requests are frozen, so a rewrite affects that one call and never the
persisted history. Per-run data belongs in ``State`` (``load_private`` / ``store_private``),
never on ``self``: one middleware instance may serve many runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final, Literal, Protocol, runtime_checkable

import attrs
from attrs import field, frozen

from hango.agent.interrupts import trace
from hango.agent.interrupts.records import (
    DECISIONS,
    Decision,
    Interrupt,
    InterruptError,
    PendingAction,
    argument_digest,
    interrupt_id,
    now_iso,
)
from hango.agent.state import State
from hango.provider.messages import JSON, Request, TextBlock, ToolUseBlock
from hango.provider.model import Model, ModelResponse
from hango.tool.base import Tool, ToolResult


class CallProgress:
    """What the chain did with one tool call in this pass; shared by every rewrite of the
    call's ``ToolCallRequest`` (``attrs.evolve`` keeps it) and never persisted.

    ``executed``: the innermost handler was reached. ``decided``: the call proceeds on a
    person's decision. ``started``: this pass recorded the call as started (a wrapper's retry
    may run it again; a start left by an earlier pass may not). ``answers``: the decisions read
    in this pass, by interrupt id, so a wrapper's retry sees the same answer. ``probe``: the
    loop only asks whether the call would pause; the innermost handler must not run it.
    ``tools``: the run's tools by name (what an edit to another tool resolves against).

    ``unlocked()`` is for a wrapper that answers the call itself with long work instead of
    calling ``next`` (hango-subagents runs a child run): the chain's code of a batch's calls
    runs one call at a time, and only a tool's own body runs beside its siblings; inside
    ``async with req.progress.unlocked():`` the wrapper's work does too. It must not touch the
    run's state there (siblings' chains run meanwhile) nor pause; outside a batch it changes
    nothing.
    """

    __slots__ = ("_unlock", "answers", "decided", "executed", "probe", "started", "tools")

    def __init__(
        self,
        tools: Mapping[str, Tool] | None = None,
        *,
        probe: bool = False,
        unlock: Callable[[], AbstractAsyncContextManager[None]] | None = None,
    ) -> None:
        self.tools: Mapping[str, Tool] = tools or {}
        self.probe = probe
        self.executed = False
        self.decided = False
        self.started = False
        self.answers: dict[str, Decision] = {}
        self._unlock = unlock

    def unlocked(self) -> AbstractAsyncContextManager[None]:
        """The call's work outside its batch's lock (see the class): the loop's own, else a
        context that does nothing."""
        return self._unlock() if self._unlock is not None else contextlib.nullcontext()


@frozen
class ContextCompacted:
    """A middleware compacted the history a model call sees (hango-summarization): ``tier``
    is ``"tool_results"`` (old tool results cleared), ``"summary"`` (old messages summarized)
    or ``"window"`` (old messages dropped, the summaries having failed); ``tokens_before`` /
    ``tokens_after`` are the request's input tokens (estimated) before and after;
    ``messages`` is how many messages of the history the compaction covers, in all."""

    tier: str
    tokens_before: int
    tokens_after: int
    messages: int


#: What a model call is for: ``"turn"``, the agent's own turn (its reply joins the history and
#: streams to the caller); ``"summary"``, a call a middleware makes for itself through the
#: rest of the chain (a summary of old history): counted, cached and traced like a turn, but
#: its reply is the middleware's, never streamed or added to the history.
ModelCallPurpose = Literal["turn", "summary"]
MODEL_CALL_PURPOSES: Final[tuple[ModelCallPurpose, ...]] = ("turn", "summary")


async def _nothing_to_save() -> None:
    return None


async def _nowhere(_: ContextCompacted) -> None:
    return None


@frozen
class ModelRequest:
    """One model call as the chain sees it.

    ``request.system`` is already assembled (agent blocks, then contributors' blocks in chain
    order). ``system_ends`` maps each middleware name to the index in ``request.system`` of the
    last block contributed at or before that middleware (-1 when there is none): a prompt-cache
    middleware places its breakpoint on that index, and anything a later contributor adds lands
    at a higher one.

    ``model`` is the model the innermost handler will stream from: the run's model unless a
    wrapper replaced it for this one call with ``attrs.evolve(req, model=other)`` (seed 002's
    per-call model). Provider-specific request parts (``cache_control``) are decided from it,
    per call. It is never persisted: the next call starts from the run's model again. None only
    outside a run (a chain driven by hand), where the base handler decides.

    ``purpose`` is ``"turn"`` or ``"summary"`` (``ModelCallPurpose``): a wrapper that calls
    ``next`` for its own ends marks the request ``"summary"``, so the loop neither streams
    nor keeps its reply. ``save`` saves the run now (state, private values included, with the
    history as it stands): a wrapper that got something costly before its call is sent (a
    summary) saves it, so a run killed after that pays for it once. ``emit`` adds an event to
    the run's stream (``ContextCompacted``: the CLI prints it). Outside a run both do nothing.
    """

    request: Request
    state: State
    system_ends: Mapping[str, int] = field(factory=dict)
    model: Model | None = None
    purpose: ModelCallPurpose = "turn"
    save: Callable[[], Awaitable[None]] = field(default=_nothing_to_save, eq=False, repr=False)
    emit: Callable[[ContextCompacted], Awaitable[None]] = field(
        default=_nowhere, eq=False, repr=False
    )


@frozen
class ToolCallRequest:
    """One tool call as the chain sees it; ``tool`` is None for a name no tool answers to.

    ``progress`` is the call's per-pass bookkeeping (``CallProgress``): the
    loop makes one per call and ``attrs.evolve`` carries it to every rewrite of the request.
    """

    call: ToolUseBlock
    tool: Tool | None
    state: State
    progress: CallProgress = field(factory=CallProgress, eq=False, repr=False, kw_only=True)

    def interrupt(
        self,
        middleware: str,
        name: str,
        *,
        reason: str,
        decisions: Sequence[str] = DECISIONS,
        request: JSON = None,
        call: ToolUseBlock | None = None,
    ) -> Decision:
        """Pause the run for a person's decision about this call, or return that decision.

        ``middleware`` is the calling middleware's name and ``name`` names the question; with
        the run and the call id they make the interrupt id. ``reason`` is one line for the
        person, ``decisions`` the decision types allowed (approve, edit, reject, respond),
        ``request`` optional JSON detail, ``call`` the call asked about when it is not
        ``self.call`` (an edited call, under the same call id).

        Returns the ``Decision`` recorded for this question and these arguments; otherwise
        raises ``Interrupt`` (a ``BaseException``: let it propagate), after which the run is
        suspended. Only valid before this call ran: asked after ``next`` reached the tool, it
        raises ``InterruptError`` naming the middleware (as it does for unknown decisions).
        """
        allowed = tuple(decisions)
        unknown = [d for d in allowed if d not in DECISIONS]
        if not allowed or unknown:
            raise InterruptError(
                f"middleware {middleware!r}: interrupt {name!r} allows decisions "
                f"{list(allowed)}; give a non-empty list of {', '.join(DECISIONS)}"
            )
        asked = call or self.call
        progress, book = self.progress, self.state.interrupts
        action_id = interrupt_id(self.state.run_id, self.call.id, middleware, name)
        digest = argument_digest(asked.name, asked.input)
        known = progress.answers.get(action_id)
        if known is not None and known.digest == digest:
            return known  # asked again in this pass (a wrapper's retry): the same answer, once
        entry = book.find(action_id)
        if entry is not None and entry.decision is not None and entry.digest == digest:
            progress.answers[action_id] = entry.decision
            progress.decided = True
            trace.resumed(entry, entry.decision)
            return entry.decision
        if progress.executed:
            raise InterruptError(
                f"middleware {middleware!r} raised interrupt {name!r} for tool call "
                f"{self.call.id!r} ({self.call.name}) after the call ran; an interrupt must come "
                "before calling next"
            )
        raise Interrupt(
            PendingAction(
                id=action_id,
                tool_call_id=self.call.id,
                tool=asked.name,
                input=asked.input,
                digest=digest,
                decisions=allowed,  # type: ignore[arg-type]  # checked above
                middleware=middleware,
                name=name,
                reason=reason,
                asked_at=now_iso(),
                request=request,
                outcome_unknown=self.call.id in book.started,
            )
        )

    def with_call(self, call: ToolUseBlock) -> ToolCallRequest:
        """This request for ``call`` instead (an edit): ``tool`` is the run's tool of that name
        (None if there is none), its progress is kept."""
        if call.name == self.call.name:
            return attrs.evolve(self, call=call)
        return attrs.evolve(self, call=call, tool=self.progress.tools.get(call.name))


ModelHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]
ToolHandler = Callable[[ToolCallRequest], Awaitable[ToolResult]]


@runtime_checkable
class Middleware(Protocol):
    """Marker: a middleware has a unique ``name`` (its slot in ``STACK_ORDER``)."""

    name: str


@runtime_checkable
class ModelWrapper(Protocol):
    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse: ...


@runtime_checkable
class ToolWrapper(Protocol):
    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult: ...


@runtime_checkable
class RunHook(Protocol):
    async def before_run(self, state: State) -> None: ...


@runtime_checkable
class ToolProvider(Protocol):
    def provide_tools(self, state: State) -> Sequence[Tool]: ...


@runtime_checkable
class PromptContributor(Protocol):
    def system_blocks(self, state: State) -> Sequence[TextBlock]: ...


@runtime_checkable
class ToolChecker(Protocol):
    """A middleware whose options name tools (or Python objects) checks them before a run is
    recorded: ``check_tools`` gets the name of every tool the run can call (the agent's own
    and those the plugins provide) and raises ``ConfigError`` naming its options table and key
    for a name no tool has, or an object that does not import. Called once per run start, so
    a typo fails at load, not at the first gated call (issue "Run integrity II", item 5)."""

    def check_tools(self, tools: Collection[str]) -> None: ...


#: Capability protocols in documentation order, with the names ``hango plugins`` prints.
CAPABILITIES: tuple[tuple[str, type], ...] = (
    ("model_wrapper", ModelWrapper),
    ("tool_wrapper", ToolWrapper),
    ("run_hook", RunHook),
    ("tool_provider", ToolProvider),
    ("prompt_contributor", PromptContributor),
)


def capabilities(mw: object) -> tuple[str, ...]:
    """The capability names ``mw`` implements."""
    return tuple(name for name, proto in CAPABILITIES if isinstance(mw, proto))
