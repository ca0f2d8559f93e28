"""The JSON form of a run's events, one object per event (``hango run --jsonl``).

An event becomes ``{"type": NAME, ...its fields}``: ``NAME`` is the event class's name in
snake_case (``RunStarted`` -> ``run_started``, ``TextDelta`` -> ``text_delta``), the fields
keep their Python names, and values take the shapes ``hango runs show --json`` uses: ids are
strings, statuses and stop reasons their values, a message ``{"role", "content": [blocks]}``, a
tool call ``{"type": "tool_use", "id", "name", "input"}``, usage and tool results objects with
their field names. For example::

    {"type": "tool_call_finished", "call": {"type": "tool_use", "id": "toolu_1",
     "name": "read_file", "input": {"path": "a.md"}},
     "result": {"content": "# A", "is_error": false}}

Every event a run emits has this form, the provider's stream events included, so an event
added later needs no change here.
"""

from __future__ import annotations

import re
from typing import Any

from hango.agent.events import Event
from hango.convert import CONVERTER

_WORD = re.compile(r"(?<!^)(?=[A-Z])")


def event_type(event: Event) -> str:
    """``"run_started"`` for a ``RunStarted``: the class name in snake_case."""
    return _WORD.sub("_", type(event).__name__).lower()


def event_to_json(event: Event) -> dict[str, Any]:
    """``event`` as a JSON object (see the module docstring); json.dumps takes the result."""
    fields = CONVERTER.unstructure(event)
    return {"type": event_type(event), **fields}
