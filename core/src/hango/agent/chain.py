"""``Chain``: an ordered list of middlewares, partitioned by capability once.

Index 0 is the OUTERMOST wrapper for both model and tool calls. The onion for a given base
handler is composed once and reused, so a call costs one bound-method call per layer.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

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
from hango.agent.state import State
from hango.provider.messages import TextBlock
from hango.provider.model import ModelResponse
from hango.tool.base import Tool, ToolResult, error_result


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


def _guard_tool(base: ToolHandler) -> ToolHandler:
    """The innermost tool handler: an exception becomes an error result, so every wrapper sees
    a result. Cancellation passes through; ``SystemExit`` and ``KeyboardInterrupt`` raised by
    tool code are a tool's failure too (a tool calling ``sys.exit`` must not end the process)."""

    async def innermost(req: ToolCallRequest) -> ToolResult:
        try:
            return await base(req)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            return error_result("tool %r failed: %s: %s", req.call.name, type(exc).__name__, exc)

    return innermost


class Chain:
    """An ordered middleware chain. Build it with ``Chain.build``; it is immutable."""

    def __init__(self, middlewares: Sequence[Middleware]) -> None:
        names = [m.name for m in middlewares]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"middleware names must be unique; repeated: {', '.join(dupes)}")
        self.middlewares: tuple[Middleware, ...] = tuple(middlewares)
        self.names: tuple[str, ...] = tuple(names)
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

    @classmethod
    def build(cls, middlewares: Sequence[Middleware]) -> Chain:
        """Partition ``middlewares`` by capability; raises ``ValueError`` on a repeated name."""
        return cls(middlewares)

    def __len__(self) -> int:
        return len(self.middlewares)

    # -- model calls ---------------------------------------------------------------------

    def model_handler(self, base: ModelHandler) -> ModelHandler:
        """The onion around ``base`` (composed once per base and kept)."""
        cached = self._model_onion
        if cached is not None and cached[0] is base:
            return cached[1]
        onion = base
        for mw in reversed(self._model_wrappers):
            onion = _bind_next(mw.wrap_model_call, onion)
        self._model_onion = (base, onion)
        return onion

    async def model_call(self, req: ModelRequest, base: ModelHandler) -> ModelResponse:
        """Assemble ``req.request.system`` (see ``system_layout``), then run the onion.

        ``req.request.system`` on entry holds the agent's own blocks.
        """
        request = req.request
        system, ends = self.system_layout(request.system, req.state)
        if len(system) != len(request.system):  # evolve costs microseconds: only if changed
            request = attrs.evolve(request, system=system)
        return await self.model_handler(base)(ModelRequest(request, req.state, ends, req.model))

    # -- tool calls ----------------------------------------------------------------------

    def tool_handler(self, base: ToolHandler) -> ToolHandler:
        """The onion around ``base``, innermost the exception guard (composed once per base)."""
        cached = self._tool_onion
        if cached is not None and cached[0] is base:
            return cached[1]
        onion = _guard_tool(base)
        for mw in reversed(self._tool_wrappers):
            onion = _bind_next(mw.wrap_tool_call, onion)
        self._tool_onion = (base, onion)
        return onion

    async def tool_call(self, req: ToolCallRequest, base: ToolHandler) -> ToolResult:
        """Run the tool onion around ``base``; an exception in ``base`` becomes an error result."""
        return await self.tool_handler(base)(req)

    # -- run hooks, tools, system blocks -------------------------------------------------

    async def before_run(self, state: State) -> None:
        """Run every RunHook once, in chain order, under one ``agent.before_run`` span with a
        child span per hook; durations go to ``hango.middleware.before_run.duration``."""
        if not self._run_hooks:
            return
        with telemetry.tracer.start_as_current_span("agent.before_run"):
            for name, hook in self._run_hooks:
                start = time.perf_counter()
                with telemetry.tracer.start_as_current_span(
                    f"before_run {name}", attributes={telemetry.MIDDLEWARE_NAME: name}
                ):
                    await hook.before_run(state)
                telemetry.before_run_duration.record(
                    time.perf_counter() - start, {telemetry.MIDDLEWARE_NAME: name}
                )

    def tools(self, state: State) -> tuple[Tool, ...]:
        """Every ToolProvider's tools, in chain order."""
        out: list[Tool] = []
        for provider in self._providers:
            out.extend(provider.provide_tools(state))
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
            blocks += tuple(contributor.system_blocks(state))
            ends.append(len(blocks) - 1)
        return blocks, SystemEnds(self._slot, ends)
