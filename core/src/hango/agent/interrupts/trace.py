"""The telemetry of interrupts: span events when a run pauses, a person decides, a run resumes.

Names and ids only go to telemetry: never the arguments, the reason or a decision's text.
"""

from __future__ import annotations

from hango import telemetry
from hango.agent.interrupts.records import Decision, PendingAction


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


def decided(action: PendingAction) -> None:
    """Record ``agent.interrupt_decided`` on the current span for ``action``'s decision."""
    _trace(telemetry.INTERRUPT_DECIDED, action, action.decision)


def resumed(action: PendingAction, decision: Decision) -> None:
    """Record ``agent.interrupt_resumed`` on the current span: a resumed pass read ``decision``."""
    _trace(telemetry.INTERRUPT_RESUMED, action, decision)
