"""``SubagentMiddleware`` (slot ``subagent``): the ``task`` tool, each call a child run.

A delegation is a run of its own, recorded with ``parent_run_id`` and ``parent_tool_call_id``
(one child per call), with its own agent, stack, model, state and session: its history starts
with the task description and nothing of the parent's state goes in or comes back, so
parallel children cannot collide. The child's final message is its report, stored with it;
the ``task`` result is that report, bounded with a note naming the child run.

The child is started and driven by the wrapper, which answers the call itself, because a
child that suspends for a person must suspend the parent with the ``task`` call pending, and
a pause can only be raised before a call reaches its tool. Every pass looks the child up
first, which is what makes resuming safe at any point: a finished child is never run again
(its report is reused), an interrupted one continues from its own checkpoints
(``Harness.execute``), a suspended one suspends the parent again. The run hook holds a ``task``
call whose child exists, so a resumed parent runs it again instead of repairing it away.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final

import attrs

from hango import (
    AgentDefinition,
    AgentFileError,
    ConfigError,
    Decision,
    Harness,
    PendingAction,
    PluginError,
    RunRecord,
    RunStatus,
    Tool,
    ToolContext,
    ToolResult,
    ToolSpec,
    Usage,
    error_result,
)
from hango.middleware import (
    State,
    ToolCallRequest,
    ToolHandler,
    argument_digest,
    executing_harness,
    pending_calls,
)
from hango_subagents.catalog import GENERAL_PURPOSE, Catalog, Subagent

TOOL_NAME: Final = "task"
NAME: Final = "subagent"
#: Most delegation levels under one top-level run, whatever the agent files say: a sub-agent
#: whose own file lists itself would otherwise delegate without end.
MAX_NESTING: Final = 8


def describe(catalog: Catalog) -> str:
    """The ``task`` tool's description: what delegating is for, then one line per sub-agent."""
    lines = [
        "Hand a self-contained task to a sub-agent. It works on its own, in a fresh "
        "conversation that holds only your description, and returns one final report as "
        "this tool's result. Put everything it needs in the description (goal, inputs, what "
        "to report); it cannot see this conversation. Several task calls in one turn run as "
        "separate sub-agents.",
        "",
        "Available sub-agents (subagent_type):",
    ]
    lines += [f"- {s.name}: {s.description}" for s in catalog.subagents]
    return "\n".join(lines)


class TaskTool:
    """The ``task`` tool: its spec. Its calls are answered by ``SubagentMiddleware``."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.spec = ToolSpec(
            TOOL_NAME,
            describe(catalog),
            {
                "type": "object",
                "properties": {
                    "description": {
                        "type": "string",
                        "description": "The whole task for the sub-agent, with what to report.",
                    },
                    "subagent_type": {"type": "string", "enum": list(catalog.names)},
                },
                "required": ["description", "subagent_type"],
                "additionalProperties": False,
            },
        )

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        # Valid calls are answered by SubagentMiddleware, which provides this tool.
        return error_result("task calls are run by the subagent middleware, absent here")


class SubagentMiddleware:
    """Provides ``task`` and runs each ``task`` call as a child run."""

    name = NAME

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.tool = TaskTool(catalog)

    @property
    def delegates(self) -> bool:
        """Whether this agent may delegate: it names sub-agents, below its ``max_depth``."""
        return bool(self.catalog.subagents) and self.catalog.max_depth >= 1

    def provide_tools(self, state: State) -> Sequence[Tool]:
        return (self.tool,) if self.delegates else ()

    async def before_run(self, state: State) -> None:
        """Hold the ``task`` calls of the unfinished batch whose child run exists, so a history
        repair leaves them unanswered and the loop runs them again: this middleware then
        answers them from their child (its stored report, or the child continued), where a
        synthetic "interrupted" result would make the model delegate the same work twice."""
        if not self.delegates or state.interrupts.pending:
            return  # a batch suspended for decisions is held as a whole by the loop
        # The batch may have results of the calls that finished before the stop (saved
        # one by one), so its unanswered calls are read past them.
        calls = [u for u in pending_calls(state.messages) if u.name == TOOL_NAME]
        if not calls:
            return
        harness = executing_harness()
        children = await harness.store.child_runs(harness.tenant_id, state.run_id)
        started = {c.parent_tool_call_id for c in children}
        for use in calls:
            if use.id in started and use.id not in state.interrupts.started:
                state.interrupts.start(use.id, use.name, argument_digest(use.name, use.input))

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        if not self.delegates or req.call.name != TOOL_NAME or not isinstance(req.call.input, dict):
            return await next(req)
        sub = self.catalog.get(str(req.call.input.get("subagent_type")))
        description = req.call.input.get("description")
        if sub is None or not isinstance(description, str) or not description.strip():
            return await next(req)  # the tool's schema check answers with the problem
        harness = executing_harness()
        child = await child_of(harness, req.state.run_id, req.call.id)
        if req.progress.probe:
            # Asking whether this call would pause: only a child waiting for a person does.
            if child is not None and child.status is RunStatus.SUSPENDED:
                await self._pause(req, harness, child, sub)
            return await next(req)
        # Answered here, never by calling next: the child is the call's execution, and a
        # resumed pass must reach it again whatever the loop recorded of the first one.
        if child is None:
            depth = await ancestors(harness, req.state.run_id)
            if depth >= MAX_NESTING:
                return error_result(
                    "sub-agent %r not started: run %s is %d delegations deep, the most hango "
                    "allows (%d); does a sub-agent's file delegate to itself?",
                    sub.name,
                    req.state.run_id,
                    depth,
                    MAX_NESTING,
                )
            try:
                child = await self._start(harness, req, sub, description)
            except (AgentFileError, ConfigError, PluginError) as exc:
                return error_result("sub-agent %r could not start: %s", sub.name, exc)
        if child.status is RunStatus.SUSPENDED:
            decision = await self._pause(req, harness, child, sub)
            if decision is not None and decision.type != "approve":
                return error_result(
                    "the delegation to sub-agent %r was %s by a person (child run %s)%s",
                    sub.name,
                    "rejected" if decision.type == "reject" else "answered",
                    child.id,
                    f": {decision.message}" if decision.message else "",
                )
            child = await harness.store.get_run(harness.tenant_id, child.id)
            if child.status is RunStatus.SUSPENDED:
                return error_result(
                    "sub-agent %r (child run %s) still waits for decisions; answer its calls: "
                    "hango resume %s --approve CHILD_CALL_ID",
                    sub.name,
                    child.id,
                    req.state.run_id,
                )
        if child.status is not RunStatus.COMPLETED:
            # Beside the batch's other calls, as a tool's body runs: parallel delegations
            # are separate runs that share nothing.
            async with req.progress.unlocked():
                finished = await child_harness(harness).execute(child.id)
            if finished.status is RunStatus.SUSPENDED:
                child = await harness.store.get_run(harness.tenant_id, child.id)
                await self._pause(req, harness, child, sub, finished.pending)
            if finished.status is not RunStatus.COMPLETED:
                req.state.usage += finished.usage  # what the child spent counts either way
                return error_result(
                    "sub-agent %r %s (child run %s): %s",
                    sub.name,
                    finished.status.value,
                    child.id,
                    finished.error or finished.stop_reason or "no report",
                )
        child = await harness.store.get_run(harness.tenant_id, child.id)
        # Rolled up once: this result and the state holding the sum are saved together, and a
        # pass that dies before that save adds nothing that lasts.
        req.state.usage += usage_of(child)
        return ToolResult(await report(harness, child, self.catalog.max_report_chars))

    async def _start(
        self, harness: Harness, req: ToolCallRequest, sub: Subagent, description: str
    ) -> RunRecord:
        """Record the child run answering ``req.call``."""
        if sub.agent_file is not None:
            agent = AgentDefinition.from_file(sub.agent_file)
        else:
            # The parent's own agent, one delegation level less deep.
            stored = await harness.store.get_agent(harness.tenant_id, req.state.agent_id)
            parent = AgentDefinition.from_json(stored.definition, source=f"agent {stored.name!r}")
            options = {k: dict(v) for k, v in parent.options.items()}
            options[NAME] = {**options.get(NAME, {}), "max_depth": self.catalog.max_depth - 1}
            agent = attrs.evolve(parent, options=options)
        return await child_harness(harness).start(
            agent,
            description,
            parent_run_id=req.state.run_id,
            parent_tool_call_id=req.call.id,
        )

    async def _pause(
        self,
        req: ToolCallRequest,
        harness: Harness,
        child: RunRecord,
        sub: Subagent,
        pending: Sequence[PendingAction] | None = None,
    ) -> Decision | None:
        """Suspend the parent on the child's open questions, or return the decision already
        recorded for this round of them (None when the child waits for nothing)."""
        if pending is None:
            pending = (await harness.decide(child.id, {}, queue=False)).waiting
        if not pending:
            return None
        # One question per round of the child's questions: a child that asks again after
        # being answered asks the parent anew.
        name = "child " + " ".join(sorted(p.id for p in pending))
        return req.interrupt(
            NAME,
            name,
            reason=(
                f"sub-agent {sub.name!r} (child run {child.id}) waits for a decision on "
                + ", ".join(f"{p.tool} call {p.tool_call_id}" for p in pending)
            ),
            decisions=("approve", "reject"),
            request={
                "child_run_id": str(child.id),
                "subagent": sub.name,
                "pending": [
                    {
                        "id": p.id,
                        "tool_call_id": p.tool_call_id,
                        "tool": p.tool,
                        "input": p.input,
                        "decisions": list(p.decisions),
                        "middleware": p.middleware,
                        "reason": p.reason,
                    }
                    for p in pending
                ],
            },
        )


def child_harness(harness: Harness) -> Harness:
    """A harness for child runs: the parent's store, tenant, plugins and settings, and none of
    its overrides (model, tools, middleware objects), so a child runs exactly its own agent
    and any process can continue it."""
    return Harness(
        harness.store,
        tenant_id=harness.tenant_id,
        plugins=harness.plugins,
        settings=harness.settings,
    )


async def child_of(harness: Harness, parent: uuid.UUID, call_id: str) -> RunRecord | None:
    """The child run answering tool call ``call_id`` of run ``parent``, or None."""
    children = await harness.store.child_runs(harness.tenant_id, parent)
    return next((c for c in children if c.parent_tool_call_id == call_id), None)


async def ancestors(harness: Harness, run_id: uuid.UUID) -> int:
    """How many runs above ``run_id`` delegated down to it (0: a top-level run)."""
    depth = 0
    run = await harness.store.get_run(harness.tenant_id, run_id)
    while run.parent_run_id is not None and depth < MAX_NESTING:
        depth += 1
        run = await harness.store.get_run(harness.tenant_id, run.parent_run_id)
    return depth


def usage_of(child: RunRecord) -> Usage:
    """The token usage the child run saved (zero for a state that does not hold one)."""
    saved = child.state.get("usage") if isinstance(child.state, dict) else None
    if not isinstance(saved, dict):
        return Usage()
    known = attrs.fields_dict(Usage)
    return Usage(**{k: v for k, v in saved.items() if k in known and isinstance(v, int)})


async def report(harness: Harness, child: RunRecord, limit: int) -> str:
    """The child's report (the text of its last assistant message), cut at ``limit``
    characters with a note saying where the whole report is."""
    messages = await harness.store.load_messages(harness.tenant_id, child.session_id)
    text = next((m.text for m in reversed(messages) if m.role == "assistant"), "")
    if not text.strip():
        text = "(the sub-agent finished without a written report)"
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n\n[report cut at {limit} of {len(text)} characters; the whole report "
        f"is the last message of child run {child.id}: hango runs show {child.id}]"
    )


__all__ = ["GENERAL_PURPOSE", "SubagentMiddleware", "TaskTool", "child_harness", "report"]
