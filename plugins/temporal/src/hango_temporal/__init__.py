"""hango-temporal: hango runs as Temporal workflows.

``hango submit --engine temporal`` records a run and starts its workflow (id
``hango-run-<run id>``); ``hango temporal worker --task-queue Q`` executes workflows and steps;
``hango resume RUN --approve CALL`` of a suspended run sends the decision as the workflow's
update. docs/how-to/run-on-temporal.md shows it end to end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hango.middleware import hookimpl
from hango_temporal.engine import TemporalEngine
from hango_temporal.settings import TemporalSettings
from hango_temporal.shapes import workflow_id

__all__ = ["TemporalEngine", "TemporalSettings", "workflow_id"]


@hookimpl
def hango_engines() -> Sequence[Any]:
    return [TemporalEngine()]


@hookimpl
def hango_cli_commands() -> Sequence[Any]:
    from hango_temporal.cli import temporal

    return [temporal]
