"""hango's test kit: the doubles and fixtures hango's own suites use, for plugin authors too.

Installed with hango, it is also a pytest plugin (entry point ``pytest11``), so its fixtures
(``database_url``, ``tenant``, ``store``, ``tool_box``, ``agent_dir``, ``hango_cli``, the
PostgreSQL ones: see ``hango.testing.plugin``) are there in every test of an environment with
hango in it. docs/how-to/test-a-middleware.md shows them at work.

- Runs: ``agent_harness`` (a harness on a fresh SQLite file), ``new_state``,
  ``RecordingModel`` (keeps requests; ``strict=True`` refuses invalid ones as Anthropic does),
  ``kill_and_resume`` with ``Killed``, ``saved_history``.
- Tools: ``ToolBox`` (tools that count starts and completions, can be held or killed).
- Strict history rules: ``history_problems``, ``wire_problems``, ``assert_valid_history``.
- Providers over the real SDK clients (needs the ``anthropic`` / ``openai`` extras):
  ``FakeAnthropic``, ``FakeOpenAI`` and the answers they serve (``hango.testing.providers``).
- Processes: ``write_agent``, ``HangoCli``, ``kill_when``, ``hango_executable``.
- Databases: ``run_sql``, ``scratch_database``, ``postgres_admin_url``, ``DatabaseLink`` (a
  proxy that cuts the connections to PostgreSQL and lets them in again).
- Plugins: ``assert_installed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hango.testing.cli import CLI_TENANT, HangoCli, hango_executable, kill_when, write_agent
from hango.testing.databases import (
    LOCAL_POSTGRES,
    NoServer,
    postgres_admin_url,
    run_sql,
    scratch_database,
    sqlite_url,
)
from hango.testing.faults import DatabaseLink
from hango.testing.harness import (
    KilledRun,
    RecordingModel,
    TestHarness,
    agent_harness,
    kill_and_resume,
    new_state,
    saved_history,
)
from hango.testing.history import assert_valid_history, history_problems, wire_problems
from hango.testing.installed import assert_installed
from hango.testing.tools import CountedTool, Hold, Killed, ToolBox

if TYPE_CHECKING:
    from hango.testing.providers import (
        FakeAnthropic,
        FakeOpenAI,
        FakeServer,
        Served,
        anthropic_answer,
        anthropic_error,
        anthropic_message,
        anthropic_stream,
        openai_answer,
        openai_completion,
        openai_stream,
        sse,
        streamed,
    )

_PROVIDERS = {
    "FakeAnthropic",
    "FakeOpenAI",
    "FakeServer",
    "Served",
    "anthropic_answer",
    "anthropic_error",
    "anthropic_message",
    "anthropic_stream",
    "openai_answer",
    "openai_completion",
    "openai_stream",
    "sse",
    "streamed",
}


def __getattr__(name: str) -> Any:
    # The fake servers need httpx2 (from the SDK extras): imported only when asked for.
    if name in _PROVIDERS:
        from hango.testing import providers

        return getattr(providers, name)
    raise AttributeError(f"module 'hango.testing' has no attribute {name!r}")


__all__ = [
    "CLI_TENANT",
    "LOCAL_POSTGRES",
    "CountedTool",
    "DatabaseLink",
    "FakeAnthropic",
    "FakeOpenAI",
    "FakeServer",
    "HangoCli",
    "Hold",
    "Killed",
    "KilledRun",
    "NoServer",
    "RecordingModel",
    "Served",
    "TestHarness",
    "ToolBox",
    "agent_harness",
    "anthropic_answer",
    "anthropic_error",
    "anthropic_message",
    "anthropic_stream",
    "assert_installed",
    "assert_valid_history",
    "hango_executable",
    "history_problems",
    "kill_and_resume",
    "kill_when",
    "new_state",
    "openai_answer",
    "openai_completion",
    "openai_stream",
    "postgres_admin_url",
    "run_sql",
    "saved_history",
    "scratch_database",
    "sqlite_url",
    "sse",
    "streamed",
    "wire_problems",
    "write_agent",
]
