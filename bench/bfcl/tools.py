"""hango tools for one task: one ``BfclTool`` per function doc of each involved API class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

from bench.bfcl.data import Task, function_docs
from bench.bfcl.env import ApiEnv
from bench.bfcl.schema import tool_spec
from hango import ToolContext, ToolRegistry, ToolResult, ToolSpec


@frozen
class BfclTool:
    """Calls API method ``spec.name`` on the task's ``env`` and answers with its JSON text.

    The method runs inline, not in a worker thread: BFCL's APIs are in-memory Python that
    returns in microseconds, less than a thread hop would cost.
    """

    spec: ToolSpec
    env: ApiEnv

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        outcome = self.env.call(self.spec.name, input, ctx.call.id)
        return ToolResult(outcome.text, is_error=outcome.is_error)


def task_docs(task: Task) -> dict[str, Mapping[str, Any]]:
    """Function name -> doc for every involved class (a later class wins a name, as in BFCL)."""
    return {doc["name"]: doc for cls in task.involved_classes for doc in function_docs(cls)}


def build_registry(task: Task, env: ApiEnv) -> ToolRegistry:
    """The task's tools, calling into ``env``. Raises ``ValueError`` for a doc whose function
    the API class does not have, or for two docs of one name."""
    registry = ToolRegistry()
    for cls in task.involved_classes:
        for doc in function_docs(cls):
            if doc["name"] not in env.methods:
                raise ValueError(f"{task.id}: {cls} documents {doc['name']} but has no such method")
            registry.add(BfclTool(tool_spec(doc), env))
    return registry
