"""One task's API instances (BFCL's ``func_source_code`` classes) and calls on them.

Instances are built the way BFCL's executor builds them (``eval_checker.multi_turn_eval.
multi_turn_utils.execute_multi_turn_func_call``): each involved class instantiated, its
``_load_scenario`` given a deep copy of the task's ``initial_config`` entry (stateless classes
excepted), and every public method name mapped to its instance, a later class winning a name.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attrs import frozen

from bench.bfcl.data import Task, backend_config


@frozen
class Outcome:
    """One call's result: the method's return ``value`` (None after an error), the ``text`` a
    tool answers with, whether it ``is_error`` and the ``seconds`` spent inside the method."""

    value: Any
    text: str
    is_error: bool
    seconds: float


def result_text(value: object) -> str:
    """A method's return value as the JSON text the tool returns.

    ``MathAPI.logarithm`` returns mpmath ``mpf`` numbers, which JSON cannot hold: ``default=str``
    sends their exact decimal digits as a string rather than rounding them to a float.
    """
    return json.dumps(value, ensure_ascii=False, default=str)


def bfcl_text(outcome: Outcome) -> str:
    """The result as BFCL's executor renders it (str as is, dict as JSON or ``str()`` when that
    fails, anything else ``str()``), for the cross-check against BFCL's own execution."""
    if outcome.is_error:
        return outcome.text
    value = outcome.value
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except TypeError:
            return str(value)
    return str(value)


def error_text(exc: Exception) -> str:
    """BFCL's wording for a call that raised."""
    return f"Error during execution: {exc}"


class ApiEnv:
    """The API instances of one task (class name -> instance) and their public methods.

    ``calls`` and ``api_seconds`` count the calls made through ``call`` and the time spent
    inside the methods; ``log`` lists every call made, in order, as ``(tool_use id, name,
    arguments)``: the order the APIs saw, which a harness that reorders a batch changes even
    when every result and the final state come out the same.
    """

    def __init__(
        self,
        instances: Mapping[str, object],
        log: Sequence[tuple[str | None, str, dict[str, Any]]] = (),
    ) -> None:
        self.instances = dict(instances)
        self.log = list(log)
        self.methods: dict[str, Callable[..., Any]] = {
            name: method
            for instance in self.instances.values()
            for name, method in inspect.getmembers(instance, inspect.ismethod)
            if not name.startswith("_")
        }
        self.calls = 0
        self.api_seconds = 0.0

    @classmethod
    def from_task(cls, task: Task) -> ApiEnv:
        """Fresh instances at the task's initial state."""
        config = backend_config()
        instances: dict[str, object] = {}
        for class_name in task.involved_classes:
            module = importlib.import_module(config.CLASS_FILE_PATH_MAPPING[class_name])
            instance = getattr(module, class_name)()
            if class_name not in config.STATELESS_CLASSES:
                scenario = copy.deepcopy(task.initial_config.get(class_name, {}))
                instance._load_scenario(scenario, long_context=task.long_context)
            instances[class_name] = instance
        return cls(instances)

    def call(self, name: str, arguments: Mapping[str, Any], call_id: str | None = None) -> Outcome:
        """Call method ``name`` with keyword ``arguments`` and add it to ``log`` under
        ``call_id`` (the tool_use id). An exception it raises becomes an error outcome with
        BFCL's wording."""
        method = self.methods.get(name)
        if method is None:
            return Outcome(None, f"Error during execution: no method named {name!r}", True, 0.0)
        # Each call gets its own arguments, as BFCL's executor gives it a freshly evaluated
        # literal: some methods keep what they are given (TwitterAPI.post_tweet stores its
        # mentions list and mention() later extends it), which would otherwise change the
        # caller's objects: for a hango tool, the tool_use input in the run's history.
        given = copy.deepcopy(dict(arguments))
        start = time.perf_counter()
        try:
            value = method(**given)
        except Exception as exc:
            seconds = time.perf_counter() - start
            outcome = Outcome(None, error_text(exc), True, seconds)
        else:
            seconds = time.perf_counter() - start
            outcome = Outcome(value, result_text(value), False, seconds)
        self.calls += 1
        self.api_seconds += seconds
        self.log.append((call_id, name, copy.deepcopy(dict(arguments))))
        return outcome


def first_difference(actual: Mapping[str, object], expected: Mapping[str, object]) -> str | None:
    """BFCL's state comparison (``multi_turn_checker._compare_instances``): every public
    attribute (``vars()``, no leading underscore) of each expected instance must equal the
    actual instance's. Returns ``"Class.attribute: <actual> != <expected>"`` for the first
    difference (values shortened), or None."""
    for class_name, want in expected.items():
        have = actual[class_name]
        for attribute, value in vars(want).items():
            if attribute.startswith("_"):
                continue
            got = getattr(have, attribute)
            if got != value:
                return f"{class_name}.{attribute}: {_short(got)} != {_short(value)}"
    return None


def _short(value: object, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
