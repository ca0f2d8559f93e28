"""Checks on a task's whole saved session, shared by plain and resume mode, and BFCL's own
executor they compare against."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from bench.bfcl.calls import Call, as_json
from bench.bfcl.data import Task, bfcl_module
from bench.bfcl.env import ApiEnv, bfcl_text, first_difference
from bench.bfcl.replay import call_index
from hango import Message, TextBlock
from hango_repair import INTERRUPTED


class BfclExecutor:
    """BFCL's own executor (``execute_multi_turn_func_call``) on one task's ground truth.

    BFCL keeps its instances in its module's globals under a name built from the model name
    and task id; a fresh model name per executor keeps repeated runs in one process apart, and
    ``close`` deletes them.
    """

    def __init__(self, task: Task) -> None:
        self.task = task
        self.utils = bfcl_module("eval_checker.multi_turn_eval.multi_turn_utils")
        self.checker = bfcl_module("eval_checker.multi_turn_eval.multi_turn_checker")
        self.model_name = f"hango_bench_{uuid.uuid4().hex}"

    def run(self, calls: Sequence[str]) -> tuple[list[str], dict[str, object]]:
        results, instances = self.utils.execute_multi_turn_func_call(
            list(calls),
            dict(self.task.initial_config),
            list(self.task.involved_classes),
            self.model_name,
            self.task.id,
            long_context=self.task.long_context,
        )
        return list(results), dict(instances)

    def state_error(self, actual: Mapping[str, object], expected: Mapping[str, object]) -> str:
        """BFCL's ``state_checker`` verdict: "" when valid, else its differences."""
        verdict = self.checker.state_checker(dict(actual), dict(expected))
        return "" if verdict["valid"] else str(verdict["details"]["differences"])[:300]

    def close(self) -> None:
        prefix = re.sub(r"[-./:]", "_", f"{self.model_name}_{self.task.id}_")
        for name in [n for n in vars(self.utils) if n.startswith(prefix)]:
            delattr(self.utils, name)


def _turns(history: Sequence[Message]) -> list[list[Message]]:
    """The session history split at each user message with text (one list per turn)."""
    turns: list[list[Message]] = []
    for message in history:
        if message.role == "user" and any(isinstance(b, TextBlock) for b in message.content):
            turns.append([])
        if turns:
            turns[-1].append(message)
    return turns


def check_session(
    task: Task, calls: Sequence[Sequence[Call]], history: Sequence[Message], env: ApiEnv
) -> tuple[str | None, int]:
    """Check the whole saved session of a finished task, from its first turn, against a fresh
    reference; returns the first failure (or None) and the number of calls answered as
    interrupted (by the repair plugin, after a kill).

    ``env.log`` (every call the APIs executed, in order) must equal the ground truth's calls,
    held-out ones excepted: nothing ran twice, was skipped or ran out of order. The session
    must hold one turn per task turn; in each, every ground-truth call has exactly one
    completed result, equal to the direct call's on the reference, and the direct calls agree
    with BFCL's executor. The final state must equal the reference's and pass BFCL's
    ``state_checker``. A harness that rewrites an earlier turn's saved results fails here even
    when every turn passed its own check.
    """
    expected_log = [
        (call.name, as_json(call.arguments))
        for turn, turn_calls in enumerate(calls)
        for call in turn_calls
        if call.name not in task.held_out(turn)
    ]
    executed = [(name, as_json(arguments)) for _, name, arguments in env.log]
    interrupted = sum(
        1 for m in history for r in m.tool_results if r.is_error and r.content == INTERRUPTED
    )
    if executed != expected_log:
        return log_difference(executed, expected_log), interrupted
    turns = _turns(history)
    if len(turns) != len(task.turns):
        return f"the session has {len(turns)} turns, the task {len(task.turns)}", interrupted
    reference = ApiEnv.from_task(task)
    bfcl = BfclExecutor(task)
    bfcl_instances: dict[str, object] = {}
    try:
        for turn, messages in enumerate(turns):
            problem, bfcl_instances = _check_turn(
                task, turn, calls[turn], messages, reference, bfcl
            )
            if problem is not None:
                return f"turn {turn}: {problem}", interrupted
        difference = first_difference(env.instances, reference.instances)
        if difference is not None:
            return f"final state differs at {difference}", interrupted
        verdict = bfcl.state_error(env.instances, bfcl_instances)
        if verdict:
            return f"BFCL's state_checker rejects the final state: {verdict}", interrupted
        return None, interrupted
    finally:
        bfcl.close()


def _check_turn(
    task: Task,
    turn: int,
    calls: Sequence[Call],
    messages: Sequence[Message],
    reference: ApiEnv,
    bfcl: BfclExecutor,
) -> tuple[str | None, dict[str, object]]:
    """One turn: each ground-truth call has exactly one completed result, equal to the direct
    call's (a held-out call's is the allowlist's refusal), and the direct calls agree with
    BFCL's executor. Returns the problem (or None) and BFCL's instances after the turn."""
    results = {r.tool_use_id: r for m in messages for r in m.tool_results}
    completed: dict[int | None, list[str]] = {}
    for use in (u for m in messages for u in m.tool_uses):
        result = results.get(use.id)
        if result is not None and result.is_error and result.content == INTERRUPTED:
            continue
        completed.setdefault(call_index(use.id), []).append(
            "" if result is None else result.content
        )
    if set(completed) != set(range(len(calls))):
        return f"completed calls {sorted(completed, key=str)}, expected {len(calls)}", {}
    rendered = []
    for index, call in enumerate(calls):
        outcome = reference.call(call.name, call.arguments)
        rendered.append(bfcl_text(outcome))
        saved = completed[index]
        if len(saved) != 1:
            return f"call {index} ({call.name}) has {len(saved)} completed results", {}
        if call.name not in task.held_out(turn) and saved[0] != outcome.text:
            problem = f"result {saved[0][:200]!r} != direct {outcome.text[:200]!r}"
            return f"call {index} ({call.name}) {problem}", {}
    bfcl_results, bfcl_instances = bfcl.run(task.ground_truth[turn])
    if rendered != bfcl_results:
        return f"direct results {rendered} differ from BFCL's executor {bfcl_results}", {}
    return None, bfcl_instances


def log_difference(executed: list[Any], expected: list[Any]) -> str:
    """The first place the executed calls leave the ground truth's list, said plainly."""
    for i, have in enumerate(executed):
        want = expected[i] if i < len(expected) else None
        if have != want:
            again = " again (executed twice)" if have in expected[:i] else ""
            return f"executed call {i} is {have}{again}; the ground truth's is {want}"
    return f"{len(executed)} calls executed, the ground truth has {len(expected)}"
