"""``ToolAllowlistMiddleware`` (slot ``tool_allowlist``, the last one): the agent's tool policy.

The innermost ModelWrapper and the innermost ToolWrapper. As a model wrapper it removes every
tool the agent may not use from the request handed to the provider; as a tool wrapper it
refuses any call to such a tool. Being innermost, it sees each request after every other
middleware had its say, so none of them can re-add a banned tool or rewrite a call into one.

The allowlist is the agent's effective ``tool_allowlist`` (``StackConfig.tool_allowlist``),
intersected with the run's narrowings (``hango.middleware.narrow_tools``: hango-skills narrows
the tools to a skill's ``allowed-tools`` while it is active), read from the run's state on
every call. With neither, every tool is allowed: the middleware is then a pass-through, kept
in the stack so ``hango plugins`` and the run's ``agent.middleware_stack`` show the same slots
for every agent.
"""

from __future__ import annotations

from collections.abc import Set

import attrs

from hango import ModelResponse, ToolResult, error_result
from hango.middleware import (
    REQUEST_REWRITTEN,
    SHORT_CIRCUITED,
    TOOL_NAME,
    ModelHandler,
    ModelRequest,
    State,
    ToolCallRequest,
    ToolHandler,
    record,
    tool_narrowing,
)


class ToolAllowlistMiddleware:
    """Enforces ``allowed`` (tool names; ``None`` = every tool)."""

    name = "tool_allowlist"

    def __init__(self, allowed: Set[str] | None) -> None:
        self.allowed = None if allowed is None else frozenset(allowed)

    def _policy(self, state: State) -> tuple[frozenset[str] | None, tuple[str, ...]]:
        """The tools allowed now, and the middlewares that narrowed them (empty: none did)."""
        narrowed, by = tool_narrowing(state)
        if narrowed is None:
            return self.allowed, ()
        if self.allowed is None:
            return narrowed, by
        return self.allowed & narrowed, by

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        allowed, by = self._policy(req.state)
        if allowed is None:
            return await next(req)
        tools = req.request.tools
        kept = tuple(spec for spec in tools if spec.name in allowed)
        if len(kept) == len(tools):
            return await next(req)
        record(
            REQUEST_REWRITTEN,
            middleware=self.name,
            reason="tools outside the narrowed set removed"
            if by
            else "tools outside the allowlist removed",
        )
        return await next(attrs.evolve(req, request=attrs.evolve(req.request, tools=kept)))

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        allowed, by = self._policy(req.state)
        if allowed is None:
            return await next(req)
        # Check the tool that would run as well as the name: a wrapper could pair an allowed
        # name with a banned tool.
        names = [req.call.name]
        if req.tool is not None:
            names.append(req.tool.spec.name)
        banned = [n for n in names if n not in allowed]
        if not banned:
            return await next(req)
        record(
            SHORT_CIRCUITED,
            middleware=self.name,
            reason="tool not allowed",
            attributes={TOOL_NAME: banned[0]},
        )
        if by:
            return error_result(
                "Refused: tool %r is not available now (narrowed by %s). Use one of: %s.",
                banned[0],
                ", ".join(by),
                ", ".join(sorted(allowed)) or "(no tools)",
            )
        return error_result(
            "Refused: tool %r is not allowed for this agent. Use one of: %s.",
            banned[0],
            ", ".join(sorted(allowed)) or "(no tools)",
        )
