"""``Chain``: an ordered list of middlewares, partitioned by capability once.

Index 0 is the OUTERMOST wrapper for both model and tool calls. The onion for a given base
handler is composed once and reused (``hango.agent.onion``), so a call costs one bound-method
call per layer. A middleware that breaks the contract is named by ``hango.agent.blame``; what a
wrapper returns is checked once, at the onion's outer boundary.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from hango import telemetry
from hango.agent.blame import PASS_THROUGH, Blame, describe
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
from hango.agent.onion import bind_next, guard_tool, record_model
from hango.agent.state import State, session_scoped, state_scope_problem
from hango.provider.messages import TextBlock, ToolSpec
from hango.provider.model import ModelResponse
from hango.tool.base import Tool, ToolResult


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
        self._blame = Blame(self._origins)
        for mw in middlewares:
            problem = state_scope_problem(mw)
            if problem is not None:
                raise self._blame.error(mw, "state_scope", problem)
        #: Names of the middlewares whose private state belongs to the session (declared by
        #: the class attribute ``state_scope = "session"``); every other one's is per run.
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
        # The latest result of the base handlers, for Blame.find_culprit.
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

    def __len__(self) -> int:
        return len(self.middlewares)

    # -- model calls ---------------------------------------------------------------------

    def model_handler(self, base: ModelHandler) -> ModelHandler:
        """The onion around ``base`` (composed once per base and kept)."""
        cached = self._model_onion
        if cached is not None and cached[0] is base:
            return cached[1]
        onion = record_model(base, self._last_model)
        for mw in reversed(self._model_wrappers):
            onion = bind_next(mw.wrap_model_call, onion)
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
        mreq = ModelRequest(
            request, req.state, ends, req.model, purpose=req.purpose, save=req.save, emit=req.emit
        )
        try:
            response = await self.model_handler(base)(mreq)
        except Exception as exc:
            blamed = self._blame.escaped(exc, self._model_wrappers, "wrap_model_call")
            if blamed is None:
                raise
            raise blamed from exc
        if not isinstance(response, ModelResponse):
            raise await self._blame.misreturned(
                response, self._model_wrappers, "wrap_model_call", mreq, self._last_model[0]
            )
        return response

    # -- tool calls ----------------------------------------------------------------------

    def tool_handler(self, base: ToolHandler) -> ToolHandler:
        """The onion around ``base``, innermost the exception guard (composed once per base)."""
        cached = self._tool_onion
        if cached is not None and cached[0] is base:
            return cached[1]
        onion = guard_tool(base, self._last_tool)
        for mw in reversed(self._tool_wrappers):
            onion = bind_next(mw.wrap_tool_call, onion)
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
            blamed = self._blame.escaped(exc, self._tool_wrappers, "wrap_tool_call")
            if blamed is None:
                raise
            raise blamed from exc
        if not isinstance(result, ToolResult):
            raise await self._blame.misreturned(
                result, self._tool_wrappers, "wrap_tool_call", req, self._last_tool[0]
            )
        return result

    # -- naming a middleware that broke the contract -------------------------------------

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
                    except PASS_THROUGH:
                        raise
                    except Exception as exc:
                        raise self._blame.raised(hook, "before_run", exc) from exc
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
            except PASS_THROUGH:
                raise
            except Exception as exc:
                raise self._blame.raised(provider, "provide_tools", exc) from exc
            for tool in provided:
                if not isinstance(getattr(tool, "spec", None), ToolSpec):
                    raise self._blame.error(
                        provider,
                        "provide_tools",
                        f"provided {describe(tool)} from provide_tools, which is not a Tool "
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
            except PASS_THROUGH:
                raise
            except Exception as exc:
                raise self._blame.raised(contributor, "system_blocks", exc) from exc
            for block in added:
                if not isinstance(block, TextBlock):
                    raise self._blame.error(
                        contributor,
                        "system_blocks",
                        f"returned {describe(block)} from system_blocks, which is not a TextBlock",
                    )
            blocks += added
            ends.append(len(blocks) - 1)
        return blocks, SystemEnds(self._slot, ends)
