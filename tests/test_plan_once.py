"""A run is planned once: the ``hango_middleware`` hook is asked once per run (start and
execute together, once per resume), the agent's tools are imported once and one chain is
built per execute, for ``hango run`` / ``hango resume`` and for the Harness API alike.

The counts come from the real code paths: a counting plugin registered beside the installed
ones, and counting wrappers around ``AgentDefinition.load_tools`` and ``Chain.build``.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

import hango.run.runner
from hango import AgentDefinition, Decision, Harness, RunStatus, open_store
from hango.agent.chain import Chain
from hango.cli import main
from hango.middleware import StackConfig, hookimpl
from hango.plugins import PluginManager, make_plugin_manager
from hango.testing import write_agent

TOOLS = '''
from hango import tool


@tool
def note(text: str) -> str:
    """Keep a note.

    Args:
        text: the note.
    """
    return f"noted {text}"
'''

SCRIPT = """
[[turns]]
text = "noting"
[[turns.tool_calls]]
name = "note"
input = { text = "a" }

[[turns]]
text = "noting again"
[[turns.tool_calls]]
name = "note"
input = { text = "b" }

[[turns]]
text = "done"
"""

AGENT = """
name = "planned"
model = "scripted:script.toml"
tools = ["plan_tools:note"]
"""

# The second call waits for a person: a resume with a decision.
GATED = (
    AGENT
    + """
[options.human_in_the_loop]
interrupt_on = { note = true }
"""
)


class HookCounter:
    """A plugin that provides nothing and counts how often it is asked."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def hango_middleware(self, config: StackConfig) -> None:
        self.calls += 1


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """``hook``, ``tools`` and ``chains`` counted in this process from here on; every plugin
    manager a harness makes gets the counting plugin."""
    seen: Counter[str] = Counter()
    counter = HookCounter()

    def manager(**kwargs: Any) -> PluginManager:
        pm = make_plugin_manager(**kwargs)
        pm.register(counter, name="hook-counter")
        return pm

    load_tools = AgentDefinition.load_tools
    build = Chain.build.__func__  # type: ignore[attr-defined]

    def counted_tools(self: AgentDefinition) -> Any:
        seen["tools"] += 1
        return load_tools(self)

    def counted_build(cls: type[Chain], *args: Any, **kwargs: Any) -> Chain:
        seen["chains"] += 1
        return build(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(hango.run.runner, "make_plugin_manager", manager)
    monkeypatch.setattr(AgentDefinition, "load_tools", counted_tools)
    monkeypatch.setattr(Chain, "build", classmethod(counted_build))

    class View(Counter[str]):
        def __getitem__(self, key: str) -> int:
            return counter.calls if key == "hook" else seen[key]

    return View()


def snapshot(counts: Counter[str]) -> dict[str, int]:
    return {key: counts[key] for key in ("hook", "tools", "chains")}


def invoke(folder: Path, *args: str) -> Any:
    return CliRunner().invoke(
        main, list(args), env={"HANGO_DATABASE_URL": f"sqlite:///{folder / 'hango.db'}"}
    )


@pytest.fixture
def in_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    def make(agent: str) -> Path:
        folder = write_agent(tmp_path, agent=agent, script=SCRIPT, tools={"plan_tools": TOOLS})
        monkeypatch.chdir(tmp_path)
        return folder.parent

    return make


def test_hango_run_asks_the_hook_once_imports_tools_once_builds_one_chain(
    counts: Counter[str], in_folder: Callable[[str], Path]
) -> None:
    folder = in_folder(AGENT)
    result = invoke(folder, "run", "--agent", "agent.toml", "--json", "go")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["status"] == "completed"
    assert snapshot(counts) == {"hook": 1, "tools": 1, "chains": 1}


def test_hango_resume_plans_the_run_once_more(
    counts: Counter[str], in_folder: Callable[[str], Path]
) -> None:
    folder = in_folder(GATED)
    result = invoke(folder, "run", "--agent", "agent.toml", "--json", "go")
    doc = json.loads(result.output)
    assert doc["status"] == "suspended", result.output
    assert snapshot(counts) == {"hook": 1, "tools": 1, "chains": 1}
    (pending,) = doc["pending"]
    result = invoke(folder, "resume", doc["run_id"], "--approve", pending["tool_call_id"], "--json")
    assert json.loads(result.output)["status"] == "suspended"  # the second call waits too
    assert snapshot(counts) == {"hook": 2, "tools": 2, "chains": 2}


@pytest.mark.anyio
async def test_harness_start_and_execute_plan_once_and_each_resume_once(
    counts: Counter[str], in_folder: Callable[[str], Path]
) -> None:
    folder = in_folder(GATED)
    agent = AgentDefinition.from_file(folder / "agent.toml")
    async with await open_store(f"sqlite:///{folder / 'h.db'}") as store:
        harness = Harness(store)
        run = await harness.start(agent, "go")
        first = await harness.execute(run.id)
        assert first.status is RunStatus.SUSPENDED
        assert snapshot(counts) == {"hook": 1, "tools": 1, "chains": 1}

        # A resume with decisions (decide, then execute) plans the run once.
        (pending,) = first.pending
        second = await harness.resume(run.id, {pending.tool_call_id: Decision.approve()})
        assert second.status is RunStatus.SUSPENDED
        assert snapshot(counts) == {"hook": 2, "tools": 2, "chains": 2}

        # Another harness (another process, as a worker would be) plans it once as well.
        other = Harness(store)
        (pending,) = second.pending
        await other.decide(run.id, {pending.tool_call_id: Decision.approve()}, queue=False)
        third = await other.execute(run.id)
        assert third.status is RunStatus.COMPLETED, third.error
        assert snapshot(counts) == {"hook": 3, "tools": 3, "chains": 3}

        # A queued run is planned by whoever executes it; starting it planned it once.
        queued = await harness.start(agent, "again", status=RunStatus.QUEUED)
        assert snapshot(counts) == {"hook": 4, "tools": 4, "chains": 4}
        assert (await store.get_run(harness.tenant_id, queued.id)).status is RunStatus.QUEUED


@pytest.mark.anyio
async def test_a_run_stopped_at_a_boundary_is_planned_again_by_each_execute(
    counts: Counter[str], in_folder: Callable[[str], Path]
) -> None:
    folder = in_folder(AGENT)
    agent = AgentDefinition.from_file(folder / "agent.toml")
    async with await open_store(f"sqlite:///{folder / 'h.db'}") as store:
        harness = Harness(store)
        run = await harness.start(agent, "go")
        stop = anyio.Event()
        stop.set()  # the run ends at its first turn boundary, saved as queued
        paused = await harness.execute(run.id, stop=stop)
        assert paused.status is RunStatus.QUEUED
        finished = await harness.execute(run.id)
        assert finished.status is RunStatus.COMPLETED, finished.error
    assert snapshot(counts) == {"hook": 2, "tools": 2, "chains": 2}


def test_counting_sees_what_it_counts(counts: Counter[str], tmp_path: Path) -> None:
    """The counters are live: a plan made by hand shows up in them."""
    harness = Harness.__new__(Harness)
    Harness.__init__(harness, None, settings={})  # type: ignore[arg-type]
    agent = AgentDefinition(name="x", model="scripted:none", tools=[])
    harness.planner.new(agent)
    harness.planner.new(agent)
    assert snapshot(counts) == {"hook": 2, "tools": 2, "chains": 2}


# -- settings given to the Harness reach everything that reads settings ----------------------

OVERLOADED = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})


@contextlib.asynccontextmanager
async def overloaded_server(requests: list[bytes]) -> AsyncIterator[int]:
    """A local HTTP server answering every request 529 (retry at once); yields its port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")

    async def answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += await stream.receive()
            requests.append(body)
            payload = OVERLOADED.encode()
            await stream.send(
                b"HTTP/1.1 529 Overloaded\r\ncontent-type: application/json\r\n"
                b"retry-after: 0\r\nconnection: close\r\n"
                + f"content-length: {len(payload)}\r\n\r\n".encode()
                + payload
            )

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, answer)
        yield int(listener.extra(anyio.abc.SocketAttribute.local_port))
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_model_setting_given_to_the_harness_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("HANGO_MODEL_RETRIES", "not a number")
    requests: list[bytes] = []
    async with overloaded_server(requests) as port:
        agent = AgentDefinition(
            name="remote", model="anthropic:claude-test", base_url=f"http://127.0.0.1:{port}"
        )
        async with await open_store(f"sqlite:///{tmp_path / 'h.db'}") as store:
            # Only the harness's settings: two retries, so three requests in all.
            harness = Harness(store, settings={"HANGO_MODEL_RETRIES": "2"})
            finished = await harness.run(agent, "hello")
            assert finished.status is RunStatus.FAILED
            assert "overloaded" in (finished.error or "").lower(), finished.error
            assert len(requests) == 3
            # Without settings the harness reads the environment, whose value is refused.
            finished = await Harness(store).run(agent, "hello")
            assert finished.status is RunStatus.FAILED
            assert "HANGO_MODEL_RETRIES must be an integer" in (finished.error or "")
            assert len(requests) == 3


@pytest.mark.anyio
async def test_a_store_setting_given_to_open_store_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hango import ConfigError
    from hango.store import StoreUnavailable

    monkeypatch.setenv("HANGO_DB_RETRY_SECONDS", "forever")
    nowhere = "postgresql://postgres@127.0.0.1:9/nowhere"  # the discard port: refused
    with pytest.raises(ConfigError, match="HANGO_DB_RETRY_SECONDS"):
        await open_store(nowhere)
    with anyio.fail_after(20):
        with pytest.raises(StoreUnavailable):
            await open_store(nowhere, settings={"HANGO_DB_RETRY_SECONDS": "0"})
