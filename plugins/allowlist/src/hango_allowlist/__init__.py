"""hango-allowlist: tool policy (slot ``tool_allowlist``, last in ``STACK_ORDER``).

Installed through the ``hango`` entry point ``allowlist``. The policy is the agent file's
``tool_allowlist``; with none, the middleware passes everything through.
"""

from __future__ import annotations

import hango
from hango_allowlist.middleware import ToolAllowlistMiddleware

__all__ = ["ToolAllowlistMiddleware", "hango_middleware"]


@hango.hookimpl
def hango_middleware(config: hango.StackConfig) -> ToolAllowlistMiddleware:
    """The allowlist middleware for ``config.tool_allowlist`` (None = pass-through)."""
    return ToolAllowlistMiddleware(config.tool_allowlist)
