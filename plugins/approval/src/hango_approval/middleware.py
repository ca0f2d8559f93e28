"""``HumanInTheLoopMiddleware`` (slot ``human_in_the_loop``): calls wait for a person.

A ToolWrapper. For a call to a gated tool (``hango_approval.policy``) it asks, through
``req.interrupt``, before anything runs: the run is suspended until a person decides, then
resumes at this call.

- ``approve``: the call runs as asked.
- ``edit``: the call runs with the person's arguments. An edit to another tool is checked
  against THAT tool's policy and may be asked again (an edit never skips a gate); an edit to
  the same tool is its approval. The model's result says that the call was edited and how it
  ran, so it does not take its own arguments for unanswered and call again.
- ``reject``: the call does not run; the model gets an error result with the person's message.
- ``respond``: the call does not run; the model gets the person's text as its result.

An answer is for one call and one interrupt cycle: the next call to the same tool, with the
same arguments or not, is asked again. Sitting inside repeat detection and budgets, a call they
refuse never reaches a person; inside it, the allowlist still refuses a banned tool that an
edit names.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Final

from hango import ToolResult, ToolUseBlock, error_result
from hango.middleware import (
    REQUEST_REWRITTEN,
    SHORT_CIRCUITED,
    TOOL_NAME,
    ConfigError,
    ToolCallRequest,
    ToolHandler,
    record,
)
from hango_approval.policy import Predicate, ToolPolicy, load_predicate, policies

#: How many times one call may be edited into another gated tool before it is refused.
MAX_EDITS: Final = 3


class HumanInTheLoopMiddleware:
    """Asks a person about every call to a tool in ``interrupt_on`` (tool name -> ``True``,
    a list of allowed decisions, or a ``ToolPolicy``), when its ``when`` predicate (tool name ->
    function of the arguments, or ``module:function``) says so. Raises ``ConfigError`` for a
    malformed policy (see ``policies``), naming ``source``. With nothing gated it passes every
    call through."""

    name = "human_in_the_loop"

    def __init__(
        self,
        interrupt_on: Mapping[str, bool | Sequence[str] | ToolPolicy] | None = None,
        *,
        when: Mapping[str, Predicate | str] | None = None,
        source: str = "human_in_the_loop",
    ) -> None:
        self.policies = policies(interrupt_on or {}, when, source=source)
        self.source = source
        # Imported predicates: configuration, resolved once per process, not per-run data.
        self._imported: dict[str, Predicate] = {}

    def check_tools(self, tools: Collection[str]) -> None:
        """Before a run is recorded: every gated tool exists and every ``when`` predicate
        imports (``ConfigError`` naming the table and key), so a typo never leaves the real
        tool ungated and a predicate never fails mid-run."""
        for tool, policy in self.policies.items():
            if tool not in tools:
                raise ConfigError(
                    f"{self.source}: interrupt_on.{tool}: no tool {tool!r} in this run "
                    f"(tools: {', '.join(sorted(tools)) or 'none'})"
                )
            if isinstance(policy.when, str) and policy.when not in self._imported:
                self._imported[policy.when] = load_predicate(
                    policy.when, source=f"{self.source}: when.{tool}"
                )

    def _asks(self, req: ToolCallRequest, call: ToolUseBlock) -> ToolPolicy | None:
        policy = self.policies.get(call.name)
        if policy is None or not isinstance(call.input, dict):
            return None  # malformed arguments never run: nothing to approve
        if (req.tool if call is req.call else req.progress.tools.get(call.name)) is None:
            return None  # an unknown tool never runs either
        when = policy.when
        if when is None:
            return policy
        if isinstance(when, str):
            if when not in self._imported:
                self._imported[when] = load_predicate(when, source=f"{self.name} when.{call.name}")
            when = self._imported[when]
        try:
            needed = bool(when(dict(call.input)))
        except Exception:
            needed = True  # a predicate that fails must not let a call through unasked
        return policy if needed else None

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        call, edits = req.call, 0
        while (policy := self._asks(req, call)) is not None:
            question = "approve" if edits == 0 else f"approve after edit {edits}"
            reason = (
                f"tool {call.name!r} needs a person's approval"
                if edits == 0
                else f"the call was edited into tool {call.name!r}, which needs approval too"
            )
            decision = req.interrupt(
                self.name, question, reason=reason, decisions=policy.decisions, call=call
            )
            if decision.type == "approve":
                break
            if decision.type in ("reject", "respond"):
                record(
                    SHORT_CIRCUITED,
                    middleware=self.name,
                    reason=f"{decision.type}ed by a person",
                    attributes={TOOL_NAME: call.name},
                )
                if decision.type == "respond":
                    return ToolResult(decision.message or "")
                return error_result("%s The call did not run.", _rejected(decision.message))
            edited = decision.edited_call(call)
            record(REQUEST_REWRITTEN, middleware=self.name, reason="edited")
            if edited.name == call.name:
                call = edited  # the person wrote these arguments: that is their approval
                break
            if edits == MAX_EDITS:
                return error_result(
                    "Not run: this call was edited into another gated tool %d times.", MAX_EDITS
                )
            call, edits = edited, edits + 1  # the tool it now calls has its own gate
        if call is req.call:
            return await next(req)
        result = await next(req.with_call(call))
        return ToolResult(_edited_note(call) + result.content, result.is_error)


def _rejected(message: str | None) -> str:
    text = (message or "").strip()
    if not text:
        return "Rejected by a person."
    return f"Rejected by a person: {text}" + ("" if text[-1] in ".!?" else ".")


def _edited_note(call: ToolUseBlock) -> str:
    # The history keeps the model's own call; without this line the model would see its
    # arguments answered by another call's result and try again (langchain#33787).
    arguments = json.dumps(call.input, ensure_ascii=False, sort_keys=True)
    return f"[A person edited this call before it ran. It ran as: {call.name} {arguments}]\n"
