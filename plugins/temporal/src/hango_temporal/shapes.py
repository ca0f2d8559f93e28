"""What crosses the workflow boundary: ids, statuses and a person's decisions, never a run's
history or state (those stay in hango's store; Temporal caps a payload at 2 MB). Plain
dataclasses of JSON types, so Temporal's default converter carries them and the workflow
sandbox imports nothing else with them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Temporal refuses payloads above 2 MB; decisions (an edit's arguments) are checked against
#: this before they are sent, so a refusal is one clear line rather than a server error.
MAX_PAYLOAD_BYTES = 2 * 1024 * 1024

#: The workflow type every hango run executes as.
WORKFLOW_NAME = "hango.run"
#: The update that carries a person's decisions to a suspended run's workflow.
DECIDE_UPDATE = "hango.decide"


def workflow_id(run_id: str) -> str:
    """The workflow id of the hango run ``run_id``: one workflow per run, found from the id."""
    return f"hango-run-{run_id}"


@dataclass
class RunRef:
    """A run, by id, with the activity heartbeat it is executed under (seconds: a worker that
    stops heartbeating for that long is taken for dead and its step is retried elsewhere) and
    how long a suspended run waits for a person (``decision_seconds``; None: for ever) before
    each waiting call gets ``timeout_decision`` (``reject`` or ``approve``)."""

    run_id: str
    tenant_id: str
    heartbeat_seconds: float = 10.0
    decision_seconds: float | None = None
    timeout_decision: str = "reject"


@dataclass
class StepReport:
    """How a run stands after one step: ``status`` is hango's run status (``running``: more
    steps to go); ``waiting``: the tool call ids a suspended run waits on; ``error``: the
    first line of a failed run's error, clipped."""

    status: str
    waiting: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class DecideRequest:
    """Decisions for a suspended run: tool call id -> a decision as a JSON object (``type``:
    approve | edit | reject | respond, and ``input``, ``tool``, ``message``, ``digest``)."""

    run: RunRef
    decisions: dict[str, dict[str, Any]]


@dataclass
class DecideReport:
    """What the decisions did (``hango.Decided`` by ids): the run's status afterwards, the
    call ids recorded, those already recorded identically, those still waiting."""

    status: str
    recorded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
