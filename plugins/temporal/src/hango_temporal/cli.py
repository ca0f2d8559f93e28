"""``hango temporal worker`` and ``hango temporal cancel``, added through
``hango_cli_commands``."""

from __future__ import annotations

import logging
import os
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import click

from hango import Config, ConfigError, EngineError, Harness, StoreError, open_store
from hango_temporal.engine import TemporalEngine, connect
from hango_temporal.settings import TemporalSettings

T = TypeVar("T")

_USER_ERRORS = (ConfigError, EngineError, StoreError, ValueError, OSError)


def _run(fn: Callable[[], Awaitable[T]]) -> T:
    """``fn`` on asyncio (the Temporal SDK's loop); a user's error is one line, exit 2."""
    try:
        return anyio.run(fn)
    except _USER_ERRORS as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


db_option = click.option(
    "--db", "db", metavar="URL", help="sqlite:///PATH or postgresql://... (env HANGO_DATABASE_URL)"
)


@click.group("temporal")
def temporal() -> None:
    """Run hango runs on Temporal (hango-temporal)."""


@temporal.command("worker")
@click.option(
    "--task-queue",
    "task_queue",
    help="The Temporal task queue to poll (env HANGO_TEMPORAL_TASK_QUEUE, default hango).",
)
@click.option(
    "--concurrency",
    default=20,
    show_default=True,
    type=click.IntRange(min=1),
    help="Steps (activities) executed at once.",
)
@db_option
def worker(task_queue: str | None, concurrency: int, db: str | None) -> None:
    """Execute the workflows and steps of hango runs until SIGTERM or Ctrl-C."""
    from hango_temporal.worker import hango_worker, serve

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    log = logging.getLogger("hango.temporal")
    log.setLevel(logging.INFO)

    async def main_() -> None:
        config = Config.from_env()
        settings = TemporalSettings.from_settings(os.environ)
        queue = task_queue or settings.task_queue
        store = await open_store(db or config.database_url)
        try:
            client = await connect(settings)
            w = hango_worker(client, store, task_queue=queue, concurrency=concurrency)

            async def ready() -> None:
                log.info(
                    "temporal worker %s:%d ready: %s namespace %s, task queue %s, concurrency %d",
                    socket.gethostname(),
                    os.getpid(),
                    settings.address,
                    settings.namespace,
                    queue,
                    concurrency,
                )

            await serve(w, ready=ready)
        finally:
            await store.aclose()
        log.info("temporal worker stopped")

    _run(main_)


@temporal.command("cancel")
@db_option
@click.argument("run_id")
def cancel(db: str | None, run_id: str) -> None:
    """Cancel RUN_ID's workflow (RUN_ID whole); the run is saved as cancelled."""

    async def main_() -> str:
        config = Config.from_env()
        store = await open_store(db or config.database_url)
        try:
            try:
                rid = uuid.UUID(run_id)
            except ValueError:
                raise ConfigError(
                    f"RUN_ID must be a whole run id (a UUID), got {run_id!r}"
                ) from None
            record = await store.get_run(config.tenant_id, rid)
            if record.config.get("engine") != "temporal":
                raise ConfigError(
                    f"run {rid} does not run on Temporal (hango submit --engine temporal)"
                )
            engine = TemporalEngine()
            await engine.cancel(Harness(store, tenant_id=config.tenant_id), rid)
            return str(rid)
        finally:
            await store.aclose()

    click.echo(f"run {_run(main_)}: cancellation requested")
