"""BFCL's multi-turn tasks, read from the installed ``bfcl-eval`` package.

Layout used (``bfcl_eval/`` in site-packages, version pinned in the workspace ``pyproject.toml``):

- ``data/BFCL_v4_<category>.json``: one task per line (``id``, ``question``: a list of turns,
  each a list of ``{"role", "content"}`` messages, empty for a turn that only adds held-out
  functions; ``initial_config``: class name -> scenario; ``involved_classes``;
  ``missed_function``: turn index -> function names held out until that turn).
- ``data/possible_answer/BFCL_v4_<category>.json``: ``ground_truth``, per turn a list of
  Python-call strings such as ``"mv(source='a.txt', destination='temp')"``.
- ``data/multi_turn_func_doc/<file>.json``: one function doc per line, per API class
  (``constants.executable_backend_config.MULTI_TURN_FUNC_DOC_FILE_MAPPING``).
- ``eval_checker/multi_turn_eval/func_source_code/``: the stateful API classes.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from attrs import frozen

MULTI_TURN_PREFIX = "multi_turn_"


class BfclMissing(RuntimeError):
    """``bfcl-eval`` is not installed in this environment."""

    def __init__(self) -> None:
        super().__init__(
            "bfcl-eval is not installed in this environment: it is in the workspace's dev "
            "group; run `uv sync --all-packages`"
        )


@cache
def package_root() -> Path:
    """The folder of the installed ``bfcl_eval`` package; raises ``BfclMissing``."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or spec.origin is None:
        raise BfclMissing()
    return Path(spec.origin).parent


def bfcl_module(name: str) -> ModuleType:
    """``bfcl_eval.<name>``, imported lazily (the package is optional and untyped)."""
    package_root()
    return importlib.import_module(f"bfcl_eval.{name}")


def backend_config() -> ModuleType:
    """BFCL's class -> module / doc file mappings and its list of stateless classes."""
    return bfcl_module("constants.executable_backend_config")


def categories() -> list[str]:
    """Every BFCL v4 multi-turn category shipped with the package, e.g. ``multi_turn_base``."""
    found = (package_root() / "data").glob(f"BFCL_v4_{MULTI_TURN_PREFIX}*.json")
    return sorted(p.stem.removeprefix("BFCL_v4_") for p in found)


@frozen
class Task:
    """One BFCL multi-turn task.

    ``turns[i]`` is the user text of turn i (for a turn that only adds held-out functions,
    BFCL's own follow-up prompt); ``ground_truth[i]`` its call strings; ``missed[i]`` the
    functions that become available at turn i (they are held out before it).
    """

    id: str
    category: str
    turns: tuple[str, ...]
    ground_truth: tuple[tuple[str, ...], ...]
    initial_config: Mapping[str, Any]
    involved_classes: tuple[str, ...]
    missed: Mapping[int, tuple[str, ...]]

    @property
    def long_context(self) -> bool:
        """Whether the APIs load their long-context scenario (BFCL's own rule)."""
        return "long_context" in self.category or "composite" in self.category

    def held_out(self, turn: int) -> frozenset[str]:
        """Functions not yet available at ``turn``."""
        return frozenset(f for t, names in self.missed.items() if t > turn for f in names)


def _lines(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _turn_text(task_id: str, index: int, messages: list[dict[str, Any]], follow_up: str) -> str:
    """The user text of one turn; a turn with no message only adds held-out functions and gets
    the prompt BFCL itself sends then (``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``)."""
    if not messages:
        return follow_up
    roles = {m["role"] for m in messages}
    if roles != {"user"}:
        raise ValueError(f"{task_id} turn {index}: expected user messages only, got {roles}")
    return "\n\n".join(m["content"] for m in messages)


def load_tasks(
    category: str, *, limit: int | None = None, ids: frozenset[str] | None = None
) -> list[Task]:
    """The tasks of ``category`` in file order (the first ``limit``, or those in ``ids``).

    Raises ``ValueError`` for an unknown category or a task whose ground truth does not have
    one entry per turn, and ``BfclMissing``.
    """
    known = categories()
    if category not in known:
        raise ValueError(f"unknown category {category!r}; BFCL v4 ships: {', '.join(known)}")
    data = package_root() / "data"
    file = f"BFCL_v4_{category}.json"
    entries = _lines(data / file)
    answers = {a["id"]: a["ground_truth"] for a in _lines(data / "possible_answer" / file)}
    prompts = bfcl_module("constants.default_prompts")
    follow_up: str = prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    tasks = []
    for entry in entries:
        if ids is not None and entry["id"] not in ids:
            continue
        truth = answers[entry["id"]]
        if len(truth) != len(entry["question"]):
            raise ValueError(f"{entry['id']}: {len(entry['question'])} turns, {len(truth)} answers")
        tasks.append(
            Task(
                id=entry["id"],
                category=category,
                turns=tuple(
                    _turn_text(entry["id"], i, q, follow_up)
                    for i, q in enumerate(entry["question"])
                ),
                ground_truth=tuple(tuple(calls) for calls in truth),
                initial_config=entry.get("initial_config", {}),
                involved_classes=tuple(entry["involved_classes"]),
                missed={
                    int(t): tuple(names) for t, names in entry.get("missed_function", {}).items()
                },
            )
        )
        if limit is not None and len(tasks) >= limit:
            break
    return tasks


@cache
def function_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """The function docs of one API class, in file order."""
    file = backend_config().MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    return tuple(_lines(package_root() / "data" / "multi_turn_func_doc" / file))
