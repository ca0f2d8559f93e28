"""The pinned stack: the one place the order of the middleware chain is decided.

Plugins only say WHICH middlewares exist (hook ``hango_middleware``, asked by
``hango.discovery``); ``STACK_ORDER`` says where each one sits. Installing or removing a plugin
fills or empties a slot and never moves another. The one slot that holds more than one
middleware is ``agent``: the agent file's own ``middleware = [...]`` list, in the agent's order
(docs/explanation/middleware-architecture.md says why it sits where it does).
"""

from __future__ import annotations

from typing import Final

from attrs import frozen

from hango.agent.middleware import Middleware, capabilities

#: The slot filled by the agent's own middlewares (agent file ``middleware = [...]``, or objects
#: given in Python), in the agent's order.
AGENT_SLOT = "agent"

#: Distribution recorded for a middleware given as a Python object rather than by a plugin: a
#: run with one can only be executed by the process that holds the object.
IN_PROCESS = "<in-process>"

STACK_ORDER: tuple[str, ...] = (
    # Skills load instructions and tools first so everything after sees them as agent tools.
    "skills",
    # Filesystem offloads large tool results to files before anything measures history.
    "filesystem",
    # Sub-agents are tools; they sit outside the history-shaping middlewares below.
    "subagent",
    # MCP servers' tools: a tool provider like subagent, outside everything that wraps tool
    # calls (repeat detection, budgets, the agent's wrappers, approval, retry, the allowlist),
    # so an MCP tool is gated, counted and filtered like any other tool.
    "mcp",
    # Summarization after filesystem, so it summarises already-offloaded results.
    "summarization",
    # Repair runs before anything reads history, so every later hook sees a valid history.
    "repair_tool_calls",
    # Planning: write_todos and the plan block, before the prompt-cache breakpoint so the
    # plan is part of the system prompt the model always sees.
    "todo",
    # Repeat-call detection wraps tool calls outside the approval gate, so a blocked repeat
    # never asks a human (and is not counted by the budgets below).
    "repeat_call",
    # Budgets count the calls the run makes, outside the agent's own wrappers, so no user
    # middleware can make a call the budget does not see; a refused call never reaches the
    # approval gate.
    "limits",
    # The agent's own middlewares: after history shaping, planning and the repeat detector
    # (they see a valid history and the plan), before the prompt cache (their static system
    # blocks sit in the cached prefix), before memory (which still lands after the
    # breakpoint), and outside approval and the allowlist (a user's wrapper cannot bypass
    # either).
    AGENT_SLOT,
    # Fallback swaps the model for one call; outside the prompt cache, which decides its
    # provider-specific request parts from the model actually called.
    "model_fallback",
    # Prompt cache before memory: memory's blocks land after the breakpoint, so memory edits
    # do not invalidate the cached prefix.
    "prompt_cache",
    "memory",
    # Approval wraps the actual execution, after every middleware that may short-circuit.
    "human_in_the_loop",
    # Tool retry inside approval: a retried attempt re-runs an approved call without asking
    # again, and one approval is consumed once.
    "tool_retry",
    # Allowlist last (innermost): nothing inside it can re-add a banned tool or call one.
    "tool_allowlist",
)
#: Slot name -> its index in ``STACK_ORDER``.
SLOT: Final = {name: i for i, name in enumerate(STACK_ORDER)}


@frozen
class Placement:
    """One discovered middleware: where it came from and its slot.

    ``slot`` is its index in ``STACK_ORDER`` (the ``agent`` slot's for a middleware the agent
    lists), or None for a name outside ``STACK_ORDER`` that this agent does not list: it is
    available to agents, and inactive.
    """

    middleware: Middleware
    plugin: str
    distribution: str
    version: str
    slot: int | None

    @property
    def name(self) -> str:
        return self.middleware.name

    @property
    def capabilities(self) -> tuple[str, ...]:
        return capabilities(self.middleware)

    @property
    def origin(self) -> str:
        """Where it came from, for errors: ``plugin todo (distribution hango-todo 0.1.0)``."""
        if self.distribution == IN_PROCESS:
            return "an in-process object"
        return f"plugin {self.plugin} (distribution {self.distribution} {self.version})".rstrip()

    def record(self) -> dict[str, str]:
        """What a run records of it: ``{"name", "distribution", "version"}``."""
        return {"name": self.name, "distribution": self.distribution, "version": self.version}


def in_process(middleware: Middleware) -> Placement:
    """A middleware object given in Python, placed in the ``agent`` slot."""
    return Placement(middleware, IN_PROCESS, IN_PROCESS, "", SLOT[AGENT_SLOT])
