"""Naming the middleware that broke the contract: ``MiddlewareError`` and ``Blame``.

An exception from any capability, and a wrapper returning something that is not a
``ModelResponse`` / ``ToolResult``, become a ``MiddlewareError`` naming the middleware, where
it came from, the capability and what it raised or returned. What a wrapper returns is checked
once, at the onion's outer boundary (``hango.agent.chain``), so a healthy chain pays one
``isinstance`` per call whatever its depth; only when that check fails is the culprit looked
for, by running the wrappers once more, each layer checked, around the base's recorded result
(``Blame.find_culprit``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final

import anyio

from hango import telemetry
from hango.agent.onion import LAYER_CODE, MODEL_BASE_CODE
from hango.agent.state import State, StateError
from hango.provider.errors import ModelError
from hango.provider.model import ModelResponse
from hango.redact import redact_secrets
from hango.tool.base import ToolResult


class MiddlewareError(Exception):
    """A middleware broke the contract; the run ends with this error.

    ``middleware`` is its name, ``origin`` where it came from (for example ``"distribution
    hango-todo 0.1.0"``; ``None`` when unknown), ``capability`` the method (``wrap_tool_call``,
    ``before_run``, ...), ``detail`` what it raised or returned.
    """

    def __init__(self, middleware: str, origin: str | None, capability: str, detail: str):
        where = f"middleware {middleware!r}" + (f" ({origin})" if origin else "")
        super().__init__(f"{where} {detail}")
        self.middleware = middleware
        self.origin = origin
        self.capability = capability
        self.detail = detail


def describe(value: object) -> str:
    """A short, safe description of a value a middleware should not have returned."""
    text = repr(value)
    if len(text) > 120:
        text = text[:119] + "…"
    return redact_secrets(f"{text} ({type(value).__name__})" if value is not None else "None")


# What a wrapper must return, by capability.
EXPECTED: Final[dict[str, type]] = {
    "wrap_model_call": ModelResponse,
    "wrap_tool_call": ToolResult,
}

# Exceptions that already say what failed: the model's own failure (a fallback wrapper may
# raise it too), a malformed state (names its owner) and a nested chain's verdict.
PASS_THROUGH: Final = (ModelError, StateError, MiddlewareError)


class Blame:
    """Builds the ``MiddlewareError`` naming a chain's middleware; ``origins`` maps a name to
    where it came from (``"distribution hango-todo 0.1.0"``)."""

    __slots__ = ("_origins",)

    def __init__(self, origins: Mapping[str, str]) -> None:
        self._origins = origins

    def error(self, mw: Any, capability: str, detail: str) -> MiddlewareError:
        return MiddlewareError(mw.name, self._origins.get(mw.name), capability, detail)

    def raised(self, mw: Any, capability: str, exc: BaseException) -> MiddlewareError:
        return self.error(
            mw, capability, redact_secrets(f"raised {type(exc).__name__} in {capability}: {exc}")
        )

    def escaped(
        self, exc: Exception, wrappers: Sequence[Any], capability: str
    ) -> MiddlewareError | None:
        """The ``MiddlewareError`` for ``exc`` escaping the onion, or None when no wrapper
        raised it (it came from the base handler, or says what failed already).

        The culprit is the innermost wrapper frame the exception passed through: its own code
        or a function it called raised. A frame of the base handler below it means the
        exception came from the base and only passed through the wrappers.
        """
        if isinstance(exc, PASS_THROUGH) or not wrappers:
            return None
        culprit = innermost_wrapper(exc.__traceback__, wrappers, capability)
        return None if culprit is None else self.raised(culprit, capability, exc)

    async def misreturned(
        self,
        value: object,
        wrappers: Sequence[Any],
        capability: str,
        req: Any,
        base_result: object,
    ) -> Exception:
        """The ``MiddlewareError`` for a wrapper that returned ``value`` instead of the
        capability's result type (a ``TypeError`` when there is no wrapper: the base did)."""
        if inspect.iscoroutine(value):
            value.close()  # a forgotten await: close it, or Python warns it was never awaited
        expected = EXPECTED[capability].__name__
        what = f"returned {describe(value)} from {capability} instead of a {expected}"
        if not wrappers:
            return TypeError(f"the base handler {what}")
        culprit = (
            wrappers[0]
            if len(wrappers) == 1
            else await self.find_culprit(wrappers, capability, req, base_result)
        )
        if culprit is not None:
            return self.error(culprit, capability, what)
        suspects = ", ".join(
            m.name + (f" ({self._origins[m.name]})" if m.name in self._origins else "")
            for m in wrappers
        )
        return MiddlewareError(
            "?",
            None,
            capability,
            f"unknown: a {capability} wrapper {what}, and did not when the chain was checked "
            f"layer by layer; one of: {suspects}",
        )

    async def find_culprit(
        self, wrappers: Sequence[Any], capability: str, req: Any, base_result: object
    ) -> Any:
        """The innermost wrapper that returns a wrong type when the wrappers run again, each
        layer checked, around a base that returns ``base_result`` at once (None if none does).

        Only ever run after the chain already failed. The base (model or tool) is never called
        again; the state is restored afterwards, so the second pass leaves no trace in it. Its
        telemetry goes to a ``middleware.diagnose`` span.
        """
        expected = EXPECTED[capability]
        found: list[Any] = []
        state: State = req.state
        saved = (dict(state.private), list(state.todos), dict(state.scratch))

        async def replay(_: Any) -> Any:
            return base_result

        def checked(mw: Any, next: Callable[..., Any]) -> Callable[..., Any]:
            method = getattr(mw, capability)

            async def layer(r: Any) -> Any:
                out = await method(r, next)
                if not isinstance(out, expected):
                    if inspect.iscoroutine(out):
                        out.close()
                    found.append(mw)
                return out

            return layer

        onion: Callable[..., Any] = replay
        for mw in reversed(wrappers):
            onion = checked(mw, onion)
        with telemetry.tracer.start_as_current_span(telemetry.DIAGNOSE_SPAN):
            try:
                await onion(req)
            except (anyio.get_cancelled_exc_class(), KeyboardInterrupt, SystemExit):
                raise
            except BaseException:
                # A second failure tells nothing more than the first, and a pause (an
                # Interrupt) on this pass must not suspend the run.
                pass
            finally:
                state.private, state.todos, state.scratch = saved[0], saved[1], saved[2]
        return found[0] if found else None


def innermost_wrapper(tb: TracebackType | None, wrappers: Sequence[Any], capability: str) -> Any:
    """The wrapper whose frame is innermost in ``tb`` (None if the base's frames are below it).

    A wrapper's frame is recognised by its ``self`` (two instances of one class are told apart)
    and, for an error raised while calling it (a wrong signature), by the glue frame that calls
    its method.
    """
    by_id = {id(m): m for m in wrappers}
    codes = {getattr(type(m), capability).__code__ for m in wrappers if _has_code(m, capability)}
    culprit: Any = None
    while tb is not None:
        frame = tb.tb_frame
        code = frame.f_code
        if code is LAYER_CODE:
            method = frame.f_locals.get("method")
            culprit = by_id.get(id(getattr(method, "__self__", None)), culprit)
        elif code in codes:
            culprit = by_id.get(id(frame.f_locals.get("self")), culprit)
        elif code is MODEL_BASE_CODE:
            culprit = None  # raised below every wrapper: the base's exception, passed through
        tb = tb.tb_next
    return culprit


def _has_code(mw: object, capability: str) -> bool:
    return hasattr(getattr(type(mw), capability, None), "__code__")
