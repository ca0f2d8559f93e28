"""hango-repair: dangling tool calls (slot ``repair_tool_calls`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``repair``; ``hango_middleware`` provides one
``RepairToolCallsMiddleware`` for every run.
"""

from __future__ import annotations

from hango.middleware import StackConfig, hookimpl
from hango_repair.history import INTERRUPTED, Repair, repair_history
from hango_repair.middleware import RepairToolCallsMiddleware

__all__ = [
    "INTERRUPTED",
    "Repair",
    "RepairToolCallsMiddleware",
    "hango_middleware",
    "repair_history",
]


@hookimpl
def hango_middleware(config: StackConfig) -> RepairToolCallsMiddleware:
    """The repair middleware; it needs no settings."""
    return RepairToolCallsMiddleware()
