"""The glue of the onion: how a wrapper is bound to the handler inside it, and the two
innermost handlers (the tool call's exception guard, the model call's recorder).

``hango.agent.blame`` recognises these functions' frames in a traceback, to tell a wrapper's
own exception from one that only passed through it (``LAYER_CODE``, ``MODEL_BASE_CODE``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from hango.tool.base import ToolResult, error_result

if TYPE_CHECKING:
    from collections.abc import Callable

    from hango.agent.middleware import ModelHandler, ModelRequest, ToolCallRequest, ToolHandler
    from hango.provider.model import ModelResponse


def bind_next(method: Callable[..., Any], next: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with its second parameter fixed to ``next``.

    A plain function that returns the wrapper's awaitable unawaited: it adds no coroutine
    frame, and a positional call is the cheapest Python call (bench/chain.py measured a
    keyword ``functools.partial`` at 2.5x a bare closure layer, this at 1.2-1.35x).
    """

    def layer(req: Any) -> Any:
        return method(req, next)

    return layer


def guard_tool(base: ToolHandler, last: list[Any]) -> ToolHandler:
    """The innermost tool handler: an exception becomes an error result carrying it in
    ``ToolResult.exception``, so every wrapper sees a result (and a retry wrapper the cause).
    Cancellation passes through; ``SystemExit`` and ``KeyboardInterrupt`` raised by tool code
    are a tool's failure too (a tool calling ``sys.exit`` must not end the process). So does an
    ``Interrupt`` (a ``BaseException``, caught by nothing here): a pause is never a tool error.
    Reaching it marks the call as run, after which it may not pause. The result is also kept
    in ``last[0]``, for ``Blame.find_culprit``."""

    async def innermost(req: ToolCallRequest) -> ToolResult:
        req.progress.executed = True
        try:
            result = await base(req)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            failed = error_result("tool %r failed: %s: %s", req.call.name, type(exc).__name__, exc)
            result = attrs.evolve(failed, exception=exc)
        last[0] = result
        return result

    return innermost


def record_model(base: ModelHandler, last: list[Any]) -> ModelHandler:
    """``base``, keeping its latest response in ``last[0]`` (for ``Blame.find_culprit``)."""

    async def innermost(req: ModelRequest) -> ModelResponse:
        last[0] = await base(req)
        return last[0]  # type: ignore[no-any-return]

    return innermost


#: The code of a ``bind_next`` layer and of ``record_model``'s handler, as traceback frames show.
LAYER_CODE: Final = bind_next(print, print).__code__
MODEL_BASE_CODE: Final = record_model(print, [None]).__code__  # type: ignore[arg-type]
