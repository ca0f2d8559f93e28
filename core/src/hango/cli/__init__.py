"""The ``hango`` command (click for parsing, rich for output), a package by command.

User errors print one line on stderr and exit 2; a run that fails exits 1; a cancelled run
is saved and exits 130 (Ctrl-C) or 143 (SIGTERM); a run suspended for a person's decision
exits 3, printing what it waits for and the commands that decide. After a cancel or a failure,
a command that resumes the run is printed on stderr, ready to paste (``hango.cli.resume_hint``).
Run and session ids are taken whole or as a unique prefix, as git takes object names.

This module holds the group (``main``, with the commands plugins add through the
``hango_cli_commands`` hook), the options commands share and ``USER_ERRORS``. The commands:
``run`` (run, resume, submit), ``runs`` (runs list/show), ``db`` (db upgrade/downgrade/current),
``worker`` and ``plugins``. Beside them: ``render`` (the terminal view of a run),
``decisions`` (parsing and printing decisions), ``jsonl`` (events as JSON lines) and
``resume_hint`` (the command that resumes a run).
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import click
from rich.console import Console

from hango.agent.state import StateError
from hango.config import Config, ConfigError, HangoWarning
from hango.plugins import PluginError, make_plugin_manager
from hango.provider.errors import ModelError, ModelSpecError, ScriptError
from hango.run.engine import EngineError
from hango.store import RunStore, StoreError, resolve_id
from hango.store.base import IdKind
from hango.tool.function import abandoned_calls

T = TypeVar("T")


class _Console(Console):
    """rich's Console, except that a closed output (``hango run ... | head -1``) is not an
    error: ``closed`` is set and later writes go to the null device (rich's own handling
    raises ``SystemExit(1)`` from whatever was printing, which would fail the run). The
    command that prints checks ``closed`` and stops the run (saved as cancelled)."""

    closed = False

    def on_broken_pipe(self) -> None:
        self.closed = True
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.file.fileno())


# emoji=False: rich would print a tool path "x:smile:y" or a model's ":b:" as emoji.
console = _Console(highlight=False, emoji=False)
err_console = _Console(stderr=True, highlight=False, emoji=False)

#: Exceptions that are the user's to fix: shown as one line, never a traceback.
USER_ERRORS = (
    ConfigError,
    ScriptError,
    ModelSpecError,
    ModelError,
    StoreError,
    PluginError,
    StateError,
    EngineError,
    ValueError,
    OSError,
)


def run_async(fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return anyio.run(fn)
    except USER_ERRORS as exc:
        err_console.print(f"error: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)


def flush_telemetry() -> None:
    """Export what the run recorded now: ``--trace console`` prints its spans here, after the
    run's output, and OTLP batches leave before the process does."""
    from opentelemetry import trace

    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if flush is not None:
        flush()


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """hango's own warnings as one ``warning:`` line; any other the Python way."""
    if issubclass(category, HangoWarning):
        err_console.print(f"warning: {message}", style="yellow", markup=False, soft_wrap=True)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


def exit_with(code: int) -> None:
    """Exit with ``code``, after exporting what telemetry recorded."""
    flush_telemetry()
    sys.exit(code)


def command() -> None:
    """The ``hango`` command (and ``python -m hango``): ``main``, then the exit.

    A sync tool whose call was abandoned (the run was cancelled, or the call passed its
    timeout) may still block in its worker thread, which is no daemon: a normal interpreter
    exit would wait for it, so a finished ``hango run`` or a stopped ``hango worker`` would
    hang. Then the process exits at once, its output and logs flushed."""
    try:
        main()
    except SystemExit as exc:
        if not abandoned_calls():
            raise
        flush_telemetry()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exc.code if isinstance(exc.code, int) else 1 if exc.code else 0)


def db_url(db: str | None) -> str:
    """The store URL: ``--db`` when given, else HANGO_DATABASE_URL or the default file.

    A ``--db sqlite:///PATH`` whose folder does not exist is refused (``click.UsageError``,
    exit 2) rather than made: a typo must not open an empty database and report "no runs yet".
    Only the default (and HANGO_DATABASE_URL's) folder is created on first use."""
    if db is None:
        return Config.from_env().database_url
    if db.startswith("sqlite:///"):
        folder = Path(db.removeprefix("sqlite:///")).parent
        if not folder.is_dir():
            raise click.UsageError(f"--db {db}: folder {folder} does not exist")
    return db


def read_message(message: str | None, message_file: Path | None) -> str:
    """The user message of ``hango run`` / ``submit``: the MESSAGE argument, standard input
    when it is ``-``, or the text of ``--message-file`` (``-`` for standard input too), so a
    prompt of any size can be piped in instead of hitting the OS's argument-size limit.
    ``click.UsageError`` (exit 2) for none, both, or one that is empty or only whitespace."""
    if (message is None) == (message_file is None):
        raise click.UsageError("give the message as MESSAGE, - (standard input) or --message-file")
    if message_file is not None:
        source = "--message-file"
        if str(message_file) == "-":
            text = sys.stdin.read()
        else:
            try:
                text = message_file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise click.UsageError(f"--message-file {message_file}: {exc}") from None
    elif message == "-":
        source, text = "standard input", sys.stdin.read()
    else:
        source, text = "MESSAGE", message or ""
    if not text.strip():
        raise click.UsageError(f"the message ({source}) is empty")
    return text


async def resolve(store: RunStore, kind: IdKind, text: str) -> uuid.UUID:
    """The id ``text`` names (whole, or a unique prefix); one-line errors otherwise."""
    return await resolve_id(store, Config.from_env().tenant_id, kind, text)


db_option = click.option(
    "--db", "db", metavar="URL", help="sqlite:///PATH or postgresql://... (env HANGO_DATABASE_URL)"
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
agent_option = click.option(
    "--agent",
    "agent_path",
    type=click.Path(path_type=Path),
    default="agent.toml",
    show_default=True,
    help="The agent file.",
)
run_json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object when the run ends: ids, status, usage and the answer.",
)
message_file_option = click.option(
    "--message-file",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    help="Read the message from this file (- for standard input) instead of MESSAGE.",
)
jsonl_option = click.option(
    "--jsonl",
    is_flag=True,
    help="Stream every event as one JSON object per line (see docs/reference/events.md).",
)
model_option = click.option(
    "--model", help="Override the agent's model: scripted:PATH, anthropic:NAME, openai:NAME."
)
base_url_option = click.option(
    "--base-url", help="Base URL of an OpenAI-compatible server (with --model openai:NAME)."
)
trace_option = click.option(
    "--trace",
    type=click.Choice(["console"]),
    help="Print the run's spans on stderr after the run.",
)


class _HangoGroup(click.Group):
    """The top-level group: hango's own commands, then those plugins add through the
    ``hango_cli_commands`` hook, loaded once, when a command name is first looked up."""

    _plugin_commands: dict[str, click.Command] | None = None

    def _plugins(self) -> dict[str, click.Command]:
        if self._plugin_commands is None:
            self._plugin_commands = _load_plugin_commands(set(self.commands))
        return self._plugin_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._plugins()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name) or self._plugins().get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """A usage error (a bad option value, a missing argument) as one line naming the
        command, like every other user error, instead of click's usage block."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            err_console.print(
                f"error: {where}: {exc.format_message()} (see {where} --help)",
                markup=False,
                soft_wrap=True,
            )
            sys.exit(2)


def _load_plugin_commands(taken: set[str]) -> dict[str, click.Command]:
    """Commands from the ``hango_cli_commands`` hook, keyed by name. A plugin that fails to
    load or whose hook raises, and a name already taken, are warned about in one line and
    left out: the rest of the CLI keeps working."""
    try:
        pm = make_plugin_manager()
    except PluginError as exc:
        warnings.warn(f"plugin commands not loaded: {exc}", HangoWarning, stacklevel=2)
        return {}
    found: dict[str, click.Command] = {}
    for impl in pm.hook.hango_cli_commands.get_hookimpls():
        try:
            commands = cast(Sequence[click.Command], impl.function() or ())
        except Exception as exc:
            dist = pm.distribution_of(impl.plugin_name)[0]
            warnings.warn(
                f"plugin {impl.plugin_name} ({dist}): hango_cli_commands failed: {exc}",
                HangoWarning,
                stacklevel=2,
            )
            continue
        for command in commands:
            name = command.name or ""
            if name in taken or name in found:
                warnings.warn(
                    f"plugin {impl.plugin_name}: command {name!r} is taken; left out",
                    HangoWarning,
                    stacklevel=2,
                )
                continue
            found[name] = command
    return found


@click.group(cls=_HangoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hango")
def main() -> None:
    """hango: run agents whose every feature is a middleware."""
    warnings.showwarning = _show_warning


# The commands, one module each: importing one adds its commands to ``main``. Last, because
# they use the group and the options above.
import hango.cli.db  # noqa: E402
import hango.cli.plugins  # noqa: E402
import hango.cli.run  # noqa: E402
import hango.cli.runs  # noqa: E402
import hango.cli.worker  # noqa: E402, F401

__all__ = ["USER_ERRORS", "main"]
