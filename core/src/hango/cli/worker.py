"""``hango worker``: execute queued runs until a signal."""

from __future__ import annotations

import signal
import sys

import anyio
import click

from hango.cli import (
    db_option,
    db_url,
    main,
    run_async,
)
from hango.config import (
    Config,
)
from hango.run import Harness

#: Signals this close to the first one are the same stop (seconds).
ONE_STOP_SECONDS = 1.0


@main.command()
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs executed at once.",
)
@click.option(
    "--lease",
    "lease_seconds",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a claimed run stays this worker's unless renewed (renewed every third).",
)
@click.option(
    "--max-attempts",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="Fail a run whose workers died on it this many times.",
)
@click.option("--model", help="Override every agent's model: scripted:PATH, anthropic:NAME, ...")
@click.option("--name", help="This worker's name in leases and logs (default host:pid).")
@db_option
def worker(
    concurrency: int,
    lease_seconds: float,
    max_attempts: int,
    model: str | None,
    name: str | None,
    db: str | None,
) -> None:
    """Execute queued runs until SIGTERM or Ctrl-C.

    The first signal stops claiming, lets each run finish its current turn, saves it and puts
    it back in the queue; a second one cancels the runs at once (also saved and queued, each
    counted as an attempt) and exits, even if a tool ignores the cancel.
    Signals within a second of the first count as one (a process group's SIGTERM arrives
    twice under `uv run`: from the group, then forwarded by uv)."""
    import logging

    from hango.run.worker import Worker, wait_for_store
    from hango.telemetry.setup import configure_telemetry

    configure_telemetry(None)

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("hango.worker").setLevel(logging.INFO)

    async def main_() -> None:
        store = await wait_for_store(db_url(db))
        try:
            harness = Harness(store, tenant_id=Config.from_env().tenant_id, model_spec=model)
            w = Worker(
                harness,
                name=name,
                concurrency=concurrency,
                lease_seconds=lease_seconds,
                max_attempts=max_attempts,
            )
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with anyio.create_task_group() as tg:

                    async def on_signals() -> None:
                        first = 0.0
                        async for _ in signals:
                            now = anyio.current_time()
                            if w.stopping and now - first < ONE_STOP_SECONDS:
                                # `kill -TERM -PGID` under `uv run`: the group's signal, then
                                # uv forwarding it. One stop, not a cancel.
                                continue
                            if w.stopping:
                                logging.getLogger("hango.worker").warning("cancelling the runs")
                                w.kill()
                                return
                            first = now
                            logging.getLogger("hango.worker").info(
                                "stopping: each run finishes its turn (signal again to cancel)"
                            )
                            w.stop()

                    async def work() -> None:
                        await w.run()
                        tg.cancel_scope.cancel()

                    tg.start_soon(on_signals)
                    tg.start_soon(work)
        finally:
            await store.aclose()

    run_async(main_)
