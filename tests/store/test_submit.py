"""``hango submit`` queues a run and prints its id, on both back ends."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import anyio
from click.testing import CliRunner

from hango.agent.events import RunStatus
from hango.cli import main
from hango.provider.messages import Message
from hango.store import open_store
from hango.store.base import RunRecord

DEMO = Path(__file__).parents[2] / "examples" / "demo" / "agent.toml"


def test_submit_queues_a_run_for_the_tenant_and_prints_its_id(
    store_url: str, tenant: uuid.UUID
) -> None:
    env = {"HANGO_TENANT": str(tenant), "HANGO_DATABASE_URL": store_url}
    result = CliRunner().invoke(main, ["submit", "--agent", str(DEMO), "what is open?"], env=env)
    assert result.exit_code == 0, result.output
    run_id = uuid.UUID(result.output.strip())  # the whole output is the id
    again = CliRunner().invoke(main, ["submit", "--agent", str(DEMO), "--json", "more"], env=env)
    doc = json.loads(again.output)

    async def stored() -> tuple[RunRecord, list[Message], RunRecord]:
        async with await open_store(store_url) as store:
            run = await store.get_run(tenant, run_id)
            messages = await store.load_messages(tenant, run.session_id)
            return run, messages, await store.get_run(tenant, uuid.UUID(doc["run_id"]))

    run, messages, second = anyio.run(stored)
    assert (run.status, run.attempts, run.lease_owner) == (RunStatus.QUEUED, 0, None)
    assert messages == [Message.user("what is open?")]
    assert (doc["status"], doc["session_id"]) == ("queued", str(second.session_id))


def test_submit_refuses_an_unusable_database_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-database.db"
    bad.write_text("this is not SQLite")
    result = CliRunner().invoke(
        main, ["submit", "--agent", str(DEMO), "--db", f"sqlite:///{bad}", "hi"]
    )
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
