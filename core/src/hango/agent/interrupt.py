"""Interrupts: a middleware pauses a run for a person's decision about one tool call.

From ``wrap_tool_call``, before it calls ``next``, a middleware calls
``req.interrupt(middleware, name, reason=...)``. The first time, that raises ``Interrupt``: the
loop records the pending action (``PendingAction``) in the run's state, asks the batch's later
calls whether they would pause too (without running them), and the run ends the pass as
``suspended``. Once every pending action has a ``Decision`` (``Harness.decide``), the run goes
on from the same unfinished batch; the same ``req.interrupt`` call now returns the decision and
the middleware acts on it.

- ``Interrupt`` is a ``BaseException``: an ``except Exception`` in a wrapper (a retry, an error
  mapper) cannot turn a pause into an error result, and neither can the chain's innermost guard.
- Interrupt ids are a UUID5 of (run id, tool call id, middleware, interrupt name): no two runs,
  agents, parallel calls or middlewares share one, and a resumed pass derives the same id.
- A decision is bound to the arguments it was given for (``argument_digest`` of tool name and
  input). It stays readable for its call during one interrupt cycle and is retired once its
  call starts or gets a result (every call of the batch gets one before the next model call),
  so it never becomes a standing approval and a call is never run twice on one decision.
- A call that starts executing under a decision, or a call to a tool that is not idempotent, is
  recorded as started (``Interrupts.started``) and saved before it runs; a resumed run never
  runs a started call without a result again unless someone decides so.

Everything here lives in ``State.interrupts`` and is saved with the rest of ``runs.state_json``,
in the same save as the history.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from attrs import define, field, frozen

from hango import telemetry
from hango.provider.messages import JSON, ToolUseBlock
from hango.tool.base import ToolResult, error_result

if TYPE_CHECKING:
    from hango.agent.middleware import ToolCallRequest
    from hango.tool.base import Tool

DecisionType = Literal["approve", "edit", "reject", "respond"]

#: Every decision type, in the order hango lists them.
DECISIONS: Final[tuple[DecisionType, ...]] = get_args(DecisionType)


def now_iso() -> str:
    """The current UTC time as ISO 8601 text (what interrupt records store)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def argument_digest(tool: str, input: JSON) -> str:
    """16 hex digits of the SHA-256 of the tool name and its canonical JSON arguments: what a
    decision is bound to. Key order does not matter; any other change does."""
    canonical = json.dumps(
        {"tool": tool, "input": input}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def interrupt_id(run_id: uuid.UUID, tool_call_id: str, middleware: str, name: str) -> str:
    """The interrupt id: a UUID5 in the run's namespace of the tool call id, the middleware and
    the interrupt name. The same inputs give the same id in every process."""
    return str(uuid.uuid5(run_id, "\x1f".join((tool_call_id, middleware, name))))


def _check_decision(instance: Decision, _: object, value: str) -> None:
    if value not in DECISIONS:
        raise ValueError(f"unknown decision {value!r} (one of: {', '.join(DECISIONS)})")
    if value == "edit" and not isinstance(instance.input, dict):
        raise ValueError("an edit decision needs the new arguments as a JSON object")
    if value == "respond" and not isinstance(instance.message, str):
        raise ValueError("a respond decision needs the text the model receives as the result")
    if value != "edit" and (instance.input is not None or instance.tool is not None):
        raise ValueError(f"a {value} decision takes no arguments or tool (only edit does)")


@frozen
class Decision:
    """A person's answer to a pending action.

    ``type``: ``approve`` (run the call as asked), ``edit`` (run it with ``input``, a JSON
    object, and optionally another ``tool``), ``reject`` (do not run it; the model gets an
    error result with ``message``) or ``respond`` (do not run it; the model gets ``message`` as
    the call's result). ``digest`` binds the decision to the arguments it was made for
    (``argument_digest``); ``None`` binds it to the pending action's when it is recorded.
    Raises ``ValueError`` for a decision missing what its type needs. Build one with the named
    constructors::

        Decision.approve()
        Decision.edit({"path": "a.txt", "old": "x", "new": "y"})
        Decision.edit({"env": "staging"}, tool="deploy_preview")
        Decision.reject("Not on a Friday.")
        Decision.respond("The answer is 42.")
    """

    type: DecisionType = field(validator=_check_decision)
    input: JSON = None
    tool: str | None = None
    message: str | None = None
    digest: str | None = None

    @classmethod
    def approve(cls, *, digest: str | None = None) -> Decision:
        return cls("approve", digest=digest)

    @classmethod
    def edit(
        cls, input: dict[str, Any], *, tool: str | None = None, digest: str | None = None
    ) -> Decision:
        return cls("edit", input=input, tool=tool, digest=digest)

    @classmethod
    def reject(cls, message: str | None = None, *, digest: str | None = None) -> Decision:
        return cls("reject", message=message, digest=digest)

    @classmethod
    def respond(cls, text: str, *, digest: str | None = None) -> Decision:
        return cls("respond", message=text, digest=digest)

    def same_as(self, other: Decision) -> bool:
        """Whether ``other`` says the same thing (its digest aside)."""
        return (self.type, self.input, self.tool, self.message) == (
            other.type,
            other.input,
            other.tool,
            other.message,
        )

    def edited_call(self, call: ToolUseBlock) -> ToolUseBlock:
        """The call an edit decision stands for: the same call id, the new tool and input."""
        return ToolUseBlock(call.id, self.tool or call.name, self.input)


@frozen
class PendingAction:
    """A question a middleware asked about one tool call, and its answer once decided.

    ``id`` is the interrupt id; ``tool_call_id``, ``tool`` and ``input`` the call asked about
    (after an edit to another tool, the edited call, under the same call id); ``digest`` its
    ``argument_digest``; ``decisions`` the decision types allowed; ``middleware`` and ``name``
    who asked and which question; ``reason`` a line for the person; ``request`` optional JSON
    detail from the middleware; ``outcome_unknown`` is true when an earlier attempt of the call
    started and its result was never saved. ``asked_at`` / ``decided_at`` are ISO 8601 UTC.
    """

    id: str
    tool_call_id: str
    tool: str
    input: JSON
    digest: str
    decisions: tuple[DecisionType, ...]
    middleware: str
    name: str
    reason: str
    asked_at: str
    request: JSON = None
    outcome_unknown: bool = False
    decision: Decision | None = None
    decided_at: str | None = None


@frozen
class StartedCall:
    """A call recorded as started before it ran: its tool, arguments digest and start time."""

    tool: str
    digest: str
    started_at: str


@define
class Interrupts:
    """The interrupt record of a run (``State.interrupts``), persisted in ``runs.state_json``.

    ``pending``: the questions of the current interrupt cycle, answered or not. ``started``:
    tool call id -> ``StartedCall`` for calls that started and have no saved result yet.
    ``decided``: answered questions whose cycle is over or whose call ran, oldest first (the
    run's record of human decisions).
    """

    pending: list[PendingAction] = field(factory=list)
    started: dict[str, StartedCall] = field(factory=dict)
    decided: list[PendingAction] = field(factory=list)

    def waiting(self) -> list[PendingAction]:
        """The pending actions without a decision: what the run waits for."""
        return [p for p in self.pending if p.decision is None]

    def find(self, action_id: str) -> PendingAction | None:
        return next((p for p in self.pending if p.id == action_id), None)

    def ask(self, action: PendingAction) -> None:
        """Add ``action``, replacing a question with its id (asked again, for other arguments)."""
        self.pending = [p for p in self.pending if p.id != action.id]
        self.pending.append(action)

    def retire(self, tool_call_id: str) -> None:
        """The call ran or got a result: its answers move to ``decided`` and are never read
        again (an unanswered question about it is dropped)."""
        keep: list[PendingAction] = []
        for p in self.pending:
            if p.tool_call_id != tool_call_id:
                keep.append(p)
            elif p.decision is not None:
                self.decided.append(p)
        self.pending = keep

    def start(self, tool_call_id: str, tool: str, digest: str) -> None:
        """Record that the call starts executing now; its answers are retired."""
        self.retire(tool_call_id)
        self.started[tool_call_id] = StartedCall(tool, digest, now_iso())

    def finish(self, tool_call_id: str) -> None:
        """The call has a result (saved with this record): nothing about it is pending."""
        self.retire(tool_call_id)
        self.started.pop(tool_call_id, None)


def outcome_unknown(call: ToolUseBlock, started: StartedCall) -> ToolResult:
    """The error result of a call that started and whose result was never saved."""
    return error_result(
        "Outcome unknown: tool %r started at %s but the run stopped before its result was "
        "saved, so it may or may not have taken effect. It was not run again; check its effect "
        "before calling it again.",
        call.name,
        started.started_at,
    )


class Interrupt(BaseException):
    """The run pauses for a decision about one tool call (``action``).

    Raised by ``ToolCallRequest.interrupt``; the loop catches it, records ``action`` and ends
    the pass as ``suspended``. Deliberately not an ``Exception``: let it propagate. A wrapper
    that must clean up uses ``finally``; one that catches ``BaseException`` must re-raise it.
    """

    def __init__(self, action: PendingAction) -> None:
        super().__init__(f"{action.middleware}: {action.name} ({action.tool}, {action.id})")
        self.action = action


class InterruptError(RuntimeError):
    """An interrupt was used wrongly (raised after its call ran, bad arguments); the message
    names the middleware. It fails the run."""


def misplaced(pause: Interrupt) -> InterruptError:
    """The error for a pause that reached the runner: raised outside a tool call's
    ``wrap_tool_call`` (a model wrapper, a run hook), where nothing can wait for a decision."""
    action = pause.action
    return InterruptError(
        f"middleware {action.middleware!r} raised interrupt {action.name!r} outside a tool "
        "call; only wrap_tool_call can pause a run (ToolCallRequest.interrupt)"
    )


class CallScope:
    """What the chain did with one tool call in this pass; shared by every rewrite of the
    call's ``ToolCallRequest`` (``attrs.evolve`` keeps it) and never persisted.

    ``executed``: the innermost handler was reached. ``decided``: the call proceeds on a
    person's decision. ``started``: this pass recorded the call as started (a wrapper's retry
    may run it again; a start left by an earlier pass may not). ``answers``: the decisions read
    in this pass, by interrupt id, so a wrapper's retry sees the same answer. ``probe``: the
    loop only asks whether the call would pause; the innermost handler must not run it.
    ``tools``: the run's tools by name (what an edit to another tool resolves against).
    """

    __slots__ = ("answers", "decided", "executed", "probe", "started", "tools")

    def __init__(self, tools: Mapping[str, Tool] | None = None, *, probe: bool = False) -> None:
        self.tools: Mapping[str, Tool] = tools or {}
        self.probe = probe
        self.executed = False
        self.decided = False
        self.started = False
        self.answers: dict[str, Decision] = {}


def _trace(event: str, action: PendingAction, decision: Decision | None = None) -> None:
    # Names and ids only: never the arguments, the reason or a decision's text.
    attributes: dict[str, str] = {
        telemetry.INTERRUPT_ID: action.id,
        telemetry.INTERRUPT_NAME: action.name,
        telemetry.TOOL_NAME: action.tool,
        telemetry.TOOL_CALL_ID: action.tool_call_id,
    }
    if decision is not None:
        attributes[telemetry.INTERRUPT_DECISION] = decision.type
    telemetry.record(event, middleware=action.middleware, attributes=attributes)


def raised(action: PendingAction) -> None:
    """Record ``agent.interrupt_raised`` on the current span."""
    _trace(telemetry.INTERRUPT_RAISED, action)


def ask(
    req: ToolCallRequest,
    middleware: str,
    name: str,
    *,
    reason: str,
    decisions: Sequence[str] = DECISIONS,
    request: JSON = None,
    call: ToolUseBlock | None = None,
) -> Decision:
    """``ToolCallRequest.interrupt``: the decision recorded for this question, or ``Interrupt``."""
    allowed = tuple(decisions)
    unknown = [d for d in allowed if d not in DECISIONS]
    if not allowed or unknown:
        raise InterruptError(
            f"middleware {middleware!r}: interrupt {name!r} allows decisions "
            f"{list(allowed)}; give a non-empty list of {', '.join(DECISIONS)}"
        )
    asked = call or req.call
    scope, book = req.scope, req.state.interrupts
    action_id = interrupt_id(req.state.run_id, req.call.id, middleware, name)
    digest = argument_digest(asked.name, asked.input)
    known = scope.answers.get(action_id)
    if known is not None and known.digest == digest:
        return known  # asked again in this pass (a wrapper's retry): the same answer, once
    entry = book.find(action_id)
    if entry is not None and entry.decision is not None and entry.digest == digest:
        scope.answers[action_id] = entry.decision
        scope.decided = True
        _trace(telemetry.INTERRUPT_RESUMED, entry, entry.decision)
        return entry.decision
    if scope.executed:
        raise InterruptError(
            f"middleware {middleware!r} raised interrupt {name!r} for tool call "
            f"{req.call.id!r} ({req.call.name}) after the call ran; an interrupt must come "
            "before calling next"
        )
    raise Interrupt(
        PendingAction(
            id=action_id,
            tool_call_id=req.call.id,
            tool=asked.name,
            input=asked.input,
            digest=digest,
            decisions=allowed,  # type: ignore[arg-type]  # checked above
            middleware=middleware,
            name=name,
            reason=reason,
            asked_at=now_iso(),
            request=request,
            outcome_unknown=req.call.id in book.started,
        )
    )


def decided(action: PendingAction) -> None:
    """Record ``agent.interrupt_decided`` on the current span for ``action``'s decision."""
    _trace(telemetry.INTERRUPT_DECIDED, action, action.decision)
