"""hango-allowlist: tool policy (slot ``tool_allowlist``, last in ``STACK_ORDER``).

Installed through the ``hango`` entry point ``allowlist``. The policy is the agent file's
``tool_allowlist``; with none, the middleware passes everything through.
"""

from __future__ import annotations

from hango.middleware import StackConfig, hookimpl
from hango_allowlist.middleware import ToolAllowlistMiddleware

__all__ = ["ToolAllowlistMiddleware", "hango_middleware"]


@hookimpl
def hango_middleware(config: StackConfig) -> ToolAllowlistMiddleware:
    """The allowlist middleware for ``config.tool_allowlist`` (None = pass-through)."""
    return ToolAllowlistMiddleware(config.tool_allowlist)
