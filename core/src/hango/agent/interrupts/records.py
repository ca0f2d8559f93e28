"""The records of interrupts: what was asked, what was decided, which calls started.

``Decision`` (a person's answer), ``PendingAction`` (a question about one tool call and its
answer), ``StartedCall`` and ``InterruptBook`` (the run's book, ``State.interrupts``), the
interrupt id and the argument digest a decision is bound to, and the two exceptions:
``Interrupt`` (the pause) and ``InterruptError`` (a misuse). See ``hango.agent.interrupts``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from typing import Any, Final, Literal, get_args

from attrs import define, evolve, field, frozen

from hango.provider.messages import JSON, ToolUseBlock

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
    ``reasked`` is true when an earlier question about the same call was answered (a second
    gate, or the question asked again after a crash): a decision must then name this
    question's ``id``, so a repeated or stale decision by call id never answers it.
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
    reasked: bool = False


@frozen
class StartedCall:
    """A call recorded as started before it ran: its tool, arguments digest and start time."""

    tool: str
    digest: str
    started_at: str


@frozen
class RanCall:
    """A call whose body returned, recorded before any wrapper saw the result: its tool,
    arguments digest and result (its text as the history keeps it, ``is_error``). A pass
    that stops before the result's block is saved (a wrapper raised after ``next`` returned,
    or the process died) leaves it, and the resumed run answers the call with it instead of
    running the body again.

    The text is kept as its pieces between NUL characters (``parts``), which PostgreSQL's
    jsonb (the run's state) cannot hold; ``content`` joins them again."""

    tool: str
    digest: str
    parts: tuple[str, ...]
    is_error: bool = False

    @classmethod
    def of(cls, tool: str, digest: str, content: str, is_error: bool) -> RanCall:
        return cls(tool, digest, tuple(content.split("\x00")), is_error)

    @property
    def content(self) -> str:
        return "\x00".join(self.parts)


@define
class InterruptBook:
    """The interrupt record of a run (``State.interrupts``), persisted in ``runs.state_json``.

    ``pending``: the questions of the current interrupt cycle, answered or not. ``started``:
    tool call id -> ``StartedCall`` for calls that started and have no saved result yet.
    ``ran``: tool call id -> ``RanCall`` for calls whose body returned and whose result block
    is not saved yet. ``stepped``: the last pass ended at a step boundary inside a tool batch
    (``hango.run.step``), so the batch's unanswered calls are the next step's, not dangling
    history. ``decided``: answered questions whose cycle is over or whose call ran,
    oldest first (the run's record of human decisions).
    """

    pending: list[PendingAction] = field(factory=list)
    started: dict[str, StartedCall] = field(factory=dict)
    decided: list[PendingAction] = field(factory=list)
    ran: dict[str, RanCall] = field(factory=dict)
    stepped: bool = False

    def waiting(self) -> list[PendingAction]:
        """The pending actions without a decision: what the run waits for."""
        return [p for p in self.pending if p.decision is None]

    def find(self, action_id: str) -> PendingAction | None:
        """The pending question with interrupt id ``action_id`` (or a re-ask of it, whose id
        is ``action_id.N``)."""
        again = action_id + "."
        return next((p for p in self.pending if p.id == action_id or p.id.startswith(again)), None)

    def ask(self, action: PendingAction) -> None:
        """Add ``action``, replacing a question with its id (asked again, for other arguments).

        A new question about a call that already had one answered is marked ``reasked``; when
        the answered one had the same interrupt id (asked again after a crash), the new one's id
        becomes ``<id>.<n>``, so no decision for the old question can be taken for it."""
        if action.decision is None and not action.reasked:
            answered = (*self.pending, *self.decided)
            if any(p.tool_call_id == action.tool_call_id and p.decision for p in answered):
                used = sum(p.id.split(".")[0] == action.id for p in self.decided)
                new_id = f"{action.id}.{used}" if used else action.id
                action = evolve(action, reasked=True, id=new_id)
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

    def ran_body(self, tool_call_id: str, call: RanCall) -> None:
        """The call's body returned ``call``'s result: it is no longer only started."""
        self.started.pop(tool_call_id, None)
        self.ran[tool_call_id] = call

    def finish(self, tool_call_id: str) -> None:
        """The call has a result (saved with this record): nothing about it is pending."""
        self.retire(tool_call_id)
        self.started.pop(tool_call_id, None)
        self.ran.pop(tool_call_id, None)


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
