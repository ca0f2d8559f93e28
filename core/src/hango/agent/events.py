"""Events a run emits to its caller, in order.

``RunStarted`` first and ``RunFinished`` last. In between, for every turn: the provider's own
stream events (``hango.provider.events``: ``TextDelta`` and friends, passed through as they
arrive), ``MessageCompleted`` with the assistant message, then for each tool call
``ToolCallStarted`` / ``ToolCallFinished`` (and ``TodosUpdated`` when a call changed the plan),
then ``TurnFinished``. A call a middleware paused has ``InterruptRaised`` instead of
``ToolCallFinished`` (as do later calls of its batch that would pause too), and the run then
finishes ``suspended``. When a model wrapper drops an attempt whose events were already passed
on (it retried the call, or returned something else), ``AttemptDiscarded`` comes before the
next attempt's first event, or before ``MessageCompleted``: forget what that attempt streamed.
"""

from __future__ import annotations

import enum
import uuid
from typing import Any, TypeAlias

from attrs import frozen

from hango.agent.interrupts.records import PendingAction
from hango.agent.state import Todo
from hango.provider.events import StreamEvent
from hango.provider.messages import Message, StopReason, ToolUseBlock, Usage
from hango.tool.base import ToolResult


class RunStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: Waiting for a human decision on a pending action (an interrupt); see
    #: docs/reference/middleware-contract.md.
    SUSPENDED = "suspended"


@frozen
class RunStarted:
    run_id: uuid.UUID
    session_id: uuid.UUID
    resumed: bool


@frozen
class AttemptDiscarded:
    """The stream events since the last ``MessageCompleted`` (or since ``RunStarted``) belong
    to an attempt of model call ``turn`` (from 1) that is not kept: a UI clears the text it
    showed. ``MessageCompleted`` carries what is kept."""

    turn: int


@frozen
class MessageCompleted:
    message: Message
    stop_reason: StopReason
    usage: Usage


@frozen
class ToolCallStarted:
    call: ToolUseBlock


@frozen
class ToolCallFinished:
    call: ToolUseBlock
    result: ToolResult


@frozen
class InterruptRaised:
    """A middleware paused the run for a decision about a tool call: ``action`` says which
    call, who asks, why and which decisions are allowed."""

    action: PendingAction


@frozen
class TodosUpdated:
    todos: tuple[Todo, ...]


@frozen
class TurnFinished:
    """``turn`` counts model calls in this run, from 1."""

    turn: int


@frozen
class RunFinished:
    """``status`` is completed, failed or cancelled (or queued: stopped at a turn boundary by
    ``run_loop``'s ``stop``, to be continued; or suspended: waiting for the decisions in
    ``pending``); ``error`` says why a run failed; ``stop_reason`` is the last model call's;
    ``usage`` sums this run's model calls, across resumes (``State.usage``). ``output`` is the
    validated structured output of a completed run of an agent that declares one: an instance
    of its ``output_type`` (in the process that holds the type), else the JSON object."""

    run_id: uuid.UUID
    status: RunStatus
    stop_reason: StopReason | None
    error: str | None
    usage: Usage
    pending: tuple[PendingAction, ...] = ()
    output: Any = None


RunEvent: TypeAlias = (
    RunStarted
    | AttemptDiscarded
    | MessageCompleted
    | ToolCallStarted
    | ToolCallFinished
    | InterruptRaised
    | TodosUpdated
    | TurnFinished
    | RunFinished
)

#: Everything a run's event iterator yields.
Event: TypeAlias = RunEvent | StreamEvent
