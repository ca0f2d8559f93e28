"""OpenTelemetry names and the small API middlewares use to say what they did.

Span names and ``gen_ai.*`` attributes follow the OpenTelemetry GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/); ``hango.*`` names and the
``agent.*`` / ``middleware.*`` events come from the middleware-chain spec. Without an SDK
configured, the API's no-op tracer makes every call here nearly free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from opentelemetry import metrics, trace
from opentelemetry.util.types import AttributeValue

tracer: Final = trace.get_tracer("hango")
meter: Final = metrics.get_meter("hango")

# attribute names
MIDDLEWARE_NAME: Final = "hango.middleware.name"
REASON: Final = "hango.reason"
TOOL_NAME: Final = "gen_ai.tool.name"

# events (from the middleware-chain spec)
MIDDLEWARE_STACK: Final = "agent.middleware_stack"
REQUEST_REWRITTEN: Final = "middleware.request_rewritten"
SHORT_CIRCUITED: Final = "middleware.short_circuited"
RETRIED: Final = "middleware.retried"
REPEAT_CALL_BLOCKED: Final = "middleware.repeat_call_blocked"
STATE_MISSING: Final = "middleware.state_missing"
TODOS_UPDATED: Final = "agent.todos_updated"


def record(
    event: str,
    *,
    middleware: str,
    reason: str | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> None:
    """Add ``event`` to the current span with ``hango.middleware.name`` and an optional reason.

    This is the one call a middleware makes to report that it rewrote a request
    (``REQUEST_REWRITTEN``), short-circuited (``SHORT_CIRCUITED``) or retried (``RETRIED``).
    Never put user data (todo content, message text) in ``reason`` or ``attributes``.
    """
    span = trace.get_current_span()
    if not span.is_recording():
        return
    attrs: dict[str, AttributeValue] = {MIDDLEWARE_NAME: middleware}
    if reason is not None:
        attrs[REASON] = reason
    if attributes:
        attrs.update(attributes)
    span.add_event(event, attrs)
