"""``Chain``: an ordered list of middlewares, partitioned by capability once.

Index 0 is the OUTERMOST wrapper for both model and tool calls. The onion for a given base
handler is composed once and reused, so a call costs one bound-method call per layer.

A middleware that breaks the contract is named: an exception from any capability, and a
wrapper returning something that is not a ``ModelResponse`` / ``ToolResult``, become a
``MiddlewareError`` naming the middleware, where it came from, the capability and what it
raised or returned. What a wrapper returns is checked once, at the onion's outer boundary, so
a healthy chain pays one ``isinstance`` per call whatever its depth; only when that check fails
is the culprit looked for, by running the wrappers once more, each layer checked, around the
base's recorded result (see ``Chain._find_culprit``).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Literal

import anyio
import attrs

from hango import telemetry
from hango.agent.middleware import (
    Middleware,
    ModelHandler,
    ModelRequest,
    ModelWrapper,
    PromptContributor,
    RunHook,
    ToolCallRequest,
    ToolHandler,
    ToolProvider,
    ToolWrapper,
)
from hango.agent.state import State, StateError
from hango.provider.errors import ModelError
from hango.provider.messages import TextBlock, ToolSpec
from hango.provider.model import ModelResponse
from hango.redact import redact_secrets
from hango.tool.base import Tool, ToolResult, error_result

StateScope = Literal["run", "session"]
#: The values a middleware's ``state_scope`` class attribute may take ("run" if absent).
STATE_SCOPES: Final[tuple[StateScope, ...]] = ("run", "session")


def session_scoped(middlewares: Iterable[Middleware]) -> frozenset[str]:
    """Names of the middlewares whose class declares ``state_scope = "session"``: their
    private state carries over to the session's next run. Every other middleware's private
    state is per run (``state_scope = "run"``, the default)."""
    return frozenset(
        m.name for m in middlewares if getattr(type(m), "state_scope", "run") == "session"
    )


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


def _describe(value: object) -> str:
    """A short, safe description of a value a middleware should not have returned."""
    text = repr(value)
    if len(text) > 120:
        text = text[:119] + "…"
    return redact_secrets(f"{text} ({type(value).__name__})" if value is not None else "None")


def _bind_next(method: Callable[..., Any], next: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with its second parameter fixed to ``next``.

    A plain function that returns the wrapper's awaitable unawaited: it adds no coroutine
    frame, and a positional call is the cheapest Python call (bench/chain.py measured a
    keyword ``functools.partial`` at 2.5x a bare closure layer, this at 1.2-1.35x).
    """

    def layer(req: Any) -> Any:
        return method(req, next)

    return layer


@functools.cache
def _class_has(cls: type, capability: type) -> bool:
    # ``issubclass`` against a runtime-checkable protocol is cached per class here; an
    # ``isinstance`` check costs 5-40 us each time on 3.11 (bench/chain.py), once per
    # middleware and capability for every run's chain. Capabilities are methods of the class.
    return issubclass(cls, capability)


def _with(middlewares: Sequence[Middleware], capability: type) -> list[Any]:
    return [m for m in middlewares if _class_has(type(m), capability)]


class SystemEnds(Mapping[str, int]):
    """For each middleware name, the index in the assembled system of the last block
    contributed at or before it (-1 if none). A read-only view over one list of contributor
    end indexes, so a model call costs one entry per contributor, not per middleware."""

    __slots__ = ("_ends", "_slot")

    def __init__(self, slot: Mapping[str, int], ends: list[int]) -> None:
        self._slot = slot
        self._ends = ends

    def __getitem__(self, name: str) -> int:
        return self._ends[self._slot[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._slot)

    def __len__(self) -> int:
        return len(self._slot)


def _guard_tool(base: ToolHandler, last: list[Any]) -> ToolHandler:
    """The innermost tool handler: an exception becomes an error result carrying it in
    ``ToolResult.exception``, so every wrapper sees a result (and a retry wrapper the cause).
    Cancellation passes through; ``SystemExit`` and ``KeyboardInterrupt`` raised by tool code
    are a tool's failure too (a tool calling ``sys.exit`` must not end the process). So does an
    ``Interrupt`` (a ``BaseException``, caught by nothing here): a pause is never a tool error.
    Reaching it marks the call as run, after which it may not pause. The result is also kept
    in ``last[0]``, for ``Chain._find_culprit``."""

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


def _record_model(base: ModelHandler, last: list[Any]) -> ModelHandler:
    """``base``, keeping its latest response in ``last[0]`` (for ``Chain._find_culprit``)."""

    async def innermost(req: ModelRequest) -> ModelResponse:
        last[0] = await base(req)
        return last[0]  # type: ignore[no-any-return]

    return innermost


# What a wrapper must return, by capability.
_EXPECTED: Final[dict[str, type]] = {
    "wrap_model_call": ModelResponse,
    "wrap_tool_call": ToolResult,
}

# Exceptions that already say what failed: the model's own failure (a fallback wrapper may
# raise it too), a malformed state (names its owner) and a nested chain's verdict.
_PASS_THROUGH: Final = (ModelError, StateError, MiddlewareError)


class Chain:
    """An ordered middleware chain. Build it with ``Chain.build``; it is immutable."""

    def __init__(
        self, middlewares: Sequence[Middleware], *, origins: Mapping[str, str] | None = None
    ) -> None:
        names = [m.name for m in middlewares]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"middleware names must be unique; repeated: {', '.join(dupes)}")
        self.middlewares: tuple[Middleware, ...] = tuple(middlewares)
        self.names: tuple[str, ...] = tuple(names)
        self._origins: dict[str, str] = dict(origins or {})
        #: Names of the middlewares whose private state belongs to the session (declared by
        #: the class attribute ``state_scope = "session"``); every other one's is per run.
        for mw in middlewares:
            self._check_state_scope(mw)
        self.session_scoped: frozenset[str] = session_scoped(middlewares)
        self._model_wrappers: list[ModelWrapper] = _with(middlewares, ModelWrapper)
        self._tool_wrappers: list[ToolWrapper] = _with(middlewares, ToolWrapper)
        self._run_hooks: list[tuple[str, RunHook]] = [
            (m.name, m) for m in _with(middlewares, RunHook)
        ]
        self._providers: list[ToolProvider] = _with(middlewares, ToolProvider)
        self._contributors: list[PromptContributor] = _with(middlewares, PromptContributor)
        # name -> how many contributors sit at or before it (an index into the end list).
        slot: dict[str, int] = {}
        seen = 0
        for mw in middlewares:
            seen += _class_has(type(mw), PromptContributor)
            slot[mw.name] = seen
        self._slot = slot
        # One composed onion per base handler; a new base (a new run) replaces it.
        self._model_onion: tuple[ModelHandler, ModelHandler] | None = None
        self._tool_onion: tuple[ToolHandler, ToolHandler] | None = None
        # The latest result of the base handlers, for _find_culprit.
        self._last_model: list[Any] = [None]
        self._last_tool: list[Any] = [None]

    @classmethod
    def build(
        cls, middlewares: Sequence[Middleware], *, origins: Mapping[str, str] | None = None
    ) -> Chain:
        """Partition ``middlewares`` by capability.

        ``origins`` maps a middleware name to where it came from (``"distribution hango-todo
        0.1.0"``), used only in error messages. Raises ``ValueError`` on a repeated name and
        ``MiddlewareError`` for a ``state_scope`` other than ``"run"`` or ``"session"``.
        """
        return cls(middlewares, origins=origins)

    def _check_state_scope(self, mw: Middleware) -> None:
        scope = getattr(type(mw), "state_scope", "run")
        if scope not in STATE_SCOPES:
            raise MiddlewareError(
                mw.name,
                self._origins.get(mw.name),
                "state_scope",
                f"declares state_scope = {scope!r}; use 'run' or 'session'",
            )

    def _error(self, mw: Any, capability: str, detail: str) -> MiddlewareError:
        return MiddlewareError(mw.name, self._origins.get(mw.name), capability, detail)

    def _raised(self, mw: Any, capability: str, exc: BaseException) -> MiddlewareError:
        return self._error(
            mw, capability, redact_secrets(f"raised {type(exc).__name__} in {capability}: {exc}")
        )

    def __len__(self) -> int:
        return len(self.middlewares)

    # -- model calls ---------------------------------------------------------------------

    def model_handler(self, base: ModelHandler) -> ModelHandler:
        """The onion around ``base`` (composed once per base and kept)."""
        cached = self._model_onion
        if cached is not None and cached[0] is base:
            return cached[1]
        onion = _record_model(base, self._last_model)
        for mw in reversed(self._model_wrappers):
            onion = _bind_next(mw.wrap_model_call, onion)
        self._model_onion = (base, onion)
        return onion

    async def model_call(self, req: ModelRequest, base: ModelHandler) -> ModelResponse:
        """Assemble ``req.request.system`` (see ``system_layout``), then run the onion.

        ``req.request.system`` on entry holds the agent's own blocks. Raises
        ``MiddlewareError`` when a wrapper raises (other than ``ModelError`` or
        ``StateError``) or returns something that is not a ``ModelResponse``; an exception
        from ``base`` itself passes through unchanged.
        """
        request = req.request
        system, ends = self.system_layout(request.system, req.state)
        if len(system) != len(request.system):  # evolve costs microseconds: only if changed
            request = attrs.evolve(request, system=system)
        mreq = ModelRequest(request, req.state, ends, req.model)
        try:
            response = await self.model_handler(base)(mreq)
        except Exception as exc:
            blamed = self._blame(exc, self._model_wrappers, "wrap_model_call")
            if blamed is None:
                raise
            raise blamed from exc
        if not isinstance(response, ModelResponse):
            raise await self._misreturned(
                response, self._model_wrappers, "wrap_model_call", mreq, self._last_model[0]
            )
        return response

    # -- tool calls ----------------------------------------------------------------------

    def tool_handler(self, base: ToolHandler) -> ToolHandler:
        """The onion around ``base``, innermost the exception guard (composed once per base)."""
        cached = self._tool_onion
        if cached is not None and cached[0] is base:
            return cached[1]
        onion = _guard_tool(base, self._last_tool)
        for mw in reversed(self._tool_wrappers):
            onion = _bind_next(mw.wrap_tool_call, onion)
        self._tool_onion = (base, onion)
        return onion

    async def tool_call(self, req: ToolCallRequest, base: ToolHandler) -> ToolResult:
        """Run the tool onion around ``base``; an exception in ``base`` becomes an error result.

        Raises ``MiddlewareError`` when a wrapper raises (other than ``StateError``) or returns
        something that is not a ``ToolResult``.
        """
        try:
            result = await self.tool_handler(base)(req)
        except Exception as exc:
            blamed = self._blame(exc, self._tool_wrappers, "wrap_tool_call")
            if blamed is None:
                raise
            raise blamed from exc
        if not isinstance(result, ToolResult):
            raise await self._misreturned(
                result, self._tool_wrappers, "wrap_tool_call", req, self._last_tool[0]
            )
        return result

    # -- naming a middleware that broke the contract -------------------------------------

    def _blame(
        self, exc: Exception, wrappers: Sequence[Any], capability: str
    ) -> MiddlewareError | None:
        """The ``MiddlewareError`` for ``exc`` escaping the onion, or None when no wrapper
        raised it (it came from the base handler, or says what failed already).

        The culprit is the innermost wrapper frame the exception passed through: its own code
        or a function it called raised. A frame of the base handler below it means the
        exception came from the base and only passed through the wrappers.
        """
        if isinstance(exc, _PASS_THROUGH) or not wrappers:
            return None
        culprit = _innermost_wrapper(exc.__traceback__, wrappers, capability)
        return None if culprit is None else self._raised(culprit, capability, exc)

    async def _misreturned(
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
        expected = _EXPECTED[capability].__name__
        what = f"returned {_describe(value)} from {capability} instead of a {expected}"
        if not wrappers:
            return TypeError(f"the base handler {what}")
        culprit = (
            wrappers[0]
            if len(wrappers) == 1
            else await self._find_culprit(wrappers, capability, req, base_result)
        )
        if culprit is not None:
            return self._error(culprit, capability, what)
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

    async def _find_culprit(
        self, wrappers: Sequence[Any], capability: str, req: Any, base_result: object
    ) -> Any:
        """The innermost wrapper that returns a wrong type when the wrappers run again, each
        layer checked, around a base that returns ``base_result`` at once (None if none does).

        Only ever run after the chain already failed. The base (model or tool) is never called
        again; the state is restored afterwards, so the second pass leaves no trace in it. Its
        telemetry goes to a ``middleware.diagnose`` span.
        """
        expected = _EXPECTED[capability]
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

    # -- run hooks, tools, system blocks -------------------------------------------------

    async def before_run(self, state: State) -> None:
        """Run every RunHook once, in chain order, under one ``agent.before_run`` span with a
        child span per hook; durations go to ``hango.middleware.before_run.duration``."""
        if not self._run_hooks:
            return
        with telemetry.tracer.start_as_current_span(telemetry.BEFORE_RUN_SPAN):
            for name, hook in self._run_hooks:
                start = time.perf_counter()
                with telemetry.tracer.start_as_current_span(
                    f"before_run {name}", attributes={telemetry.MIDDLEWARE_NAME: name}
                ):
                    try:
                        await hook.before_run(state)
                    except _PASS_THROUGH:
                        raise
                    except Exception as exc:
                        raise self._raised(hook, "before_run", exc) from exc
                telemetry.before_run_duration.record(
                    time.perf_counter() - start, {telemetry.MIDDLEWARE_NAME: name}
                )

    def tools(self, state: State) -> tuple[Tool, ...]:
        """Every ToolProvider's tools, in chain order. Raises ``MiddlewareError`` when a
        provider raises or provides something that is not a tool."""
        out: list[Tool] = []
        for provider in self._providers:
            try:
                provided = list(provider.provide_tools(state))
            except _PASS_THROUGH:
                raise
            except Exception as exc:
                raise self._raised(provider, "provide_tools", exc) from exc
            for tool in provided:
                if not isinstance(getattr(tool, "spec", None), ToolSpec):
                    raise self._error(
                        provider,
                        "provide_tools",
                        f"provided {_describe(tool)} from provide_tools, which is not a Tool "
                        "(an object with a ToolSpec `spec` and an async `call`)",
                    )
            out.extend(provided)
        return tuple(out)

    def system_blocks(
        self, agent_blocks: Sequence[TextBlock], state: State
    ) -> tuple[TextBlock, ...]:
        """The agent's own blocks followed by each contributor's blocks in chain order."""
        return self.system_layout(agent_blocks, state)[0]

    def system_layout(
        self, agent_blocks: Sequence[TextBlock], state: State
    ) -> tuple[tuple[TextBlock, ...], SystemEnds]:
        """``(blocks, ends)``: the assembled system blocks and, for every middleware name, the
        index of the last block contributed at or before it (-1 if none)."""
        blocks = tuple(agent_blocks)
        ends = [len(blocks) - 1]
        for contributor in self._contributors:
            try:
                added = tuple(contributor.system_blocks(state))
            except _PASS_THROUGH:
                raise
            except Exception as exc:
                raise self._raised(contributor, "system_blocks", exc) from exc
            for block in added:
                if not isinstance(block, TextBlock):
                    raise self._error(
                        contributor,
                        "system_blocks",
                        f"returned {_describe(block)} from system_blocks, which is not a TextBlock",
                    )
            blocks += added
            ends.append(len(blocks) - 1)
        return blocks, SystemEnds(self._slot, ends)


def _innermost_wrapper(tb: TracebackType | None, wrappers: Sequence[Any], capability: str) -> Any:
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
        if code is _LAYER_CODE:
            method = frame.f_locals.get("method")
            culprit = by_id.get(id(getattr(method, "__self__", None)), culprit)
        elif code in codes:
            culprit = by_id.get(id(frame.f_locals.get("self")), culprit)
        elif code is _MODEL_BASE_CODE:
            culprit = None  # raised below every wrapper: the base's exception, passed through
        tb = tb.tb_next
    return culprit


def _has_code(mw: object, capability: str) -> bool:
    return hasattr(getattr(type(mw), capability, None), "__code__")


_LAYER_CODE: Final = _bind_next(print, print).__code__
_MODEL_BASE_CODE: Final = _record_model(print, [None]).__code__  # type: ignore[arg-type]
