"""The open chain: an agent's own middlewares from installed distributions fill the ``agent``
slot in the agent's order; ``[options.<name>]`` tables are validated by the plugin's schema;
the stack and the model a run starts with are recorded, and resume and workers rebuild exactly
them; agents defined in Python with objects run and resume in their process."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from conftest import Install
from hango import (
    AgentDefinition,
    ConfigError,
    Harness,
    ModelError,
    RunNotResumable,
    RunStatus,
    ScriptedModel,
    Usage,
)
from hango.agent.stack import AGENT_SLOT, STACK_ORDER
from hango.cli import main
from hango.config import DEFAULT_TENANT
from hango.discovery import resolve_stack
from hango.middleware import StackConfig
from hango.plugins import PluginWarning, make_plugin_manager
from hango.provider.events import MessageStop, StreamEvent, TextDelta
from hango.provider.messages import Request, StopReason
from hango.run.worker import Worker
from hango.store import RunStore, open_store
from hango.testing import hango_executable

#: A plugin module whose middleware (named NAME) appends NAME to the trace file on every model
#: call, before calling on: the file lists each call's chain from the outside in.
TRACER = """
import os
import hango.middleware

class Tracer:
    name = {name!r}

    async def wrap_model_call(self, req, next):
        with open(os.environ["HANGO_TEST_TRACE"], "a") as f:
            f.write(self.name + "\\n")
        return await next(req)

@hango.middleware.hookimpl
def hango_middleware(config):
    return Tracer()
"""

HANGO = hango_executable()
SCRIPT = [{"text": "done", "usage": {"input_tokens": 10, "output_tokens": 2}}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "trace.txt"
    monkeypatch.setenv("HANGO_TEST_TRACE", str(path))
    return path


@pytest.fixture
def tracers(install: Install, trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two distributions with middlewares of their own names, and one filling ``memory``.

    hango-memory, installed in this environment, fills ``memory`` too: its hook is set aside
    here (and the plugin disabled for the ``hango`` processes), so the test distribution
    takes the slot instead of clashing with it."""
    import hango_memory

    monkeypatch.delattr(hango_memory, "hango_middleware")
    monkeypatch.setenv("HANGO_DISABLE_PLUGINS", "memory")
    install("hango-audit", "audit", "audit_log", body=TRACER.format(name="audit_log"))
    install("hango-shout", "shout", "shout", body=TRACER.format(name="shout"))
    install("hango-recall", "recall", "memory", body=TRACER.format(name="memory"))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[RunStore]:
    async with await open_store(f"sqlite:///{tmp_path / 'hango.db'}") as s:
        yield s


def agent_file(tmp_path: Path, body: str, name: str = "agent.toml") -> Path:
    (tmp_path / "script.toml").write_text('[[turns]]\ntext = "done"\n')
    path = tmp_path / name
    path.write_text(f'name = "opened"\nmodel = "scripted:script.toml"\n{textwrap.dedent(body)}')
    return path


@pytest.mark.anyio
@pytest.mark.parametrize("listed", [["audit_log", "shout"], ["shout", "audit_log"]])
async def test_listed_middlewares_fill_the_agent_slot_in_the_agents_order(
    tracers: None, tmp_path: Path, trace: Path, store: RunStore, listed: list[str]
) -> None:
    agent = AgentDefinition.from_file(agent_file(tmp_path, f"middleware = {json.dumps(listed)}"))
    harness = Harness(store, settings={})
    finished = await harness.run(agent, "hi")
    assert finished.status is RunStatus.COMPLETED, finished.error
    # memory (a pinned slot) is inside the agent slot; the agent's own in its order.
    assert await traced(trace) == [*listed, "memory"]
    record = await store.get_run(harness.tenant_id, finished.run_id)
    stack = record.config["stack"]
    names = [e["name"] for e in stack]
    assert names == [
        "skills",
        "filesystem",
        "subagent",
        "mcp",
        "summarization",
        "repair_tool_calls",
        "todo",
        "repeat_call",
        "limits",
        *listed,
        "model_fallback",
        "prompt_cache",
        "memory",
        "human_in_the_loop",
        "tool_retry",
        "tool_allowlist",
    ]
    assert {e["name"]: (e["distribution"], e["version"]) for e in stack}["audit_log"] == (
        "hango-audit",
        "1.2.3",
    )
    assert names.index(listed[0]) > names.index("repeat_call")
    assert STACK_ORDER.index("repeat_call") < STACK_ORDER.index(AGENT_SLOT)
    assert STACK_ORDER.index(AGENT_SLOT) < STACK_ORDER.index("prompt_cache")


def test_a_middleware_nobody_lists_is_inactive(tracers: None) -> None:
    names = [p.name for p in resolve_stack(StackConfig(), make_plugin_manager(env={}))]
    assert "audit_log" not in names and "shout" not in names and "memory" in names


@pytest.mark.parametrize(
    ("listed", "message"),
    [
        ('["audit_lg"]', "middleware 'audit_lg' is not provided by any installed plugin"),
        ('["todo"]', "middleware 'todo' is a pinned slot"),
        ('["audit_log", "audit_log"]', "$.middleware: ['audit_log', 'audit_log'] has non-unique"),
    ],
)
def test_a_bad_middleware_list_is_one_line_before_any_run_is_recorded(
    tracers: None, tmp_path: Path, listed: str, message: str
) -> None:
    path = agent_file(tmp_path, f"middleware = {listed}")
    db = f"sqlite:///{tmp_path / 'hango.db'}"
    result = CliRunner().invoke(main, ["run", "--agent", str(path), "--db", db, "hi"])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert result.output.startswith("error: ")
    assert str(path) in result.output or "agent file" in result.output or "$." in result.output
    listing = CliRunner().invoke(main, ["runs", "list", "--json", "--db", db])
    assert json.loads(listing.output) == []


def test_python_objects_named_like_a_slot_or_listed_twice_are_refused(tracers: None) -> None:
    pm = make_plugin_manager(env={})
    with pytest.raises(ConfigError, match="listed twice"):
        resolve_stack(StackConfig(agent_middleware=("shout", "shout")), pm)
    clash = type("Clash", (), {"name": "todo"})()
    with pytest.raises(ConfigError, match="named 'todo'"):
        resolve_stack(StackConfig(), pm, objects=[clash])


# -- options tables -------------------------------------------------------------------------


def repeat_threshold(tmp_path: Path, table: str, env: dict[str, str]) -> int:
    agent = AgentDefinition.from_file(agent_file(tmp_path, table))
    harness = Harness.__new__(Harness)  # only the stack: no store needed
    Harness.__init__(harness, None, settings=env)  # type: ignore[arg-type]
    placements = harness.planner.new(agent).stack
    (repeat,) = [p.middleware for p in placements if p.name == "repeat_call"]
    return int(repeat.threshold)  # type: ignore[attr-defined]


def test_the_agent_files_table_wins_over_the_environment_default(tmp_path: Path) -> None:
    env = {"HANGO_REPEAT_CALL_THRESHOLD": "5"}
    assert repeat_threshold(tmp_path, "", env) == 5
    assert repeat_threshold(tmp_path, "[options.repeat_call]\nthreshold = 4\n", env) == 4
    assert repeat_threshold(tmp_path, "", {}) == 3


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[options.repeat_call]\nthreshold = 1\n", "[options.repeat_call].threshold: 1 is less"),
        ("[options.repeat_call]\nthresold = 4\n", "[options.repeat_call]: Additional properties"),
        ('[options.repeat_call]\nthreshold = "4"\n', "[options.repeat_call].threshold: '4' is not"),
        ("[options.todo]\nx = 1\n", "[options.todo]: no installed middleware named 'todo' takes"),
        ("[options.nobody]\nx = 1\n", "[options.nobody]: no installed middleware named 'nobody'"),
        ("options = { repeat_call = 3 }\n", "$.options.repeat_call: 3 is not of type 'object'"),
    ],
)
def test_an_invalid_table_names_the_agent_file_table_and_field(
    tmp_path: Path, table: str, message: str
) -> None:
    path = agent_file(tmp_path, table)
    db = f"sqlite:///{tmp_path / 'hango.db'}"
    result = CliRunner().invoke(main, ["run", "--agent", str(path), "--db", db, "hi"])
    assert result.exit_code == 2, result.output
    assert message in result.output and str(path) in result.output, result.output
    assert "Traceback" not in result.output


# -- the recorded stack: resume and workers --------------------------------------------------


@pytest.mark.anyio
async def test_resume_and_workers_rebuild_the_recorded_stack_exactly(
    tracers: None,
    tmp_path: Path,
    trace: Path,
    store: RunStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = agent_file(tmp_path, 'middleware = ["audit_log"]')
    agent = AgentDefinition.from_file(path)
    # Submitted where hango-recall (memory) is disabled: the run's stack has no memory.
    submitter = Harness(store, settings={"HANGO_DISABLE_PLUGINS": "recall"})
    by_resume = await submitter.start(agent, "one", status=RunStatus.QUEUED)
    by_worker = await submitter.start(agent, "two", status=RunStatus.QUEUED)
    recorded = [e["name"] for e in by_resume.config["stack"]]
    assert "memory" not in recorded and "audit_log" in recorded

    # `hango resume` where hango-audit is missing: refused, naming it, the run untouched.
    db = f"sqlite:///{tmp_path / 'hango.db'}"
    monkeypatch.setenv("HANGO_DISABLE_PLUGINS", "audit,memory")
    refused = await cli("resume", str(by_resume.id), "--db", db, plugins=tmp_path)
    assert refused.returncode == 2
    assert "'audit_log' from distribution hango-audit 1.2.3" in refused.stderr
    assert (await store.get_run(submitter.tenant_id, by_resume.id)).status is RunStatus.QUEUED
    assert await traced(trace) == []

    # Where both are installed (memory too): exactly the recorded stack, without memory.
    monkeypatch.setenv("HANGO_DISABLE_PLUGINS", "memory")
    resumed = await cli("resume", str(by_resume.id), "--db", db, plugins=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert await traced(trace) == ["audit_log"]

    # A worker lacking hango-audit leaves the run queued (and works on others)...
    await anyio.Path(trace).unlink()
    lacking = Harness(store, settings={"HANGO_DISABLE_PLUGINS": "audit"})
    plain = await Harness(store, settings={}).start(
        AgentDefinition.from_file(agent_file(tmp_path, "", "plain.toml")),
        "three",
        status=RunStatus.QUEUED,
    )
    async with anyio.create_task_group() as tg:
        worker = Worker(lacking, concurrency=1, lease_seconds=5)
        await tg.start(worker.run)
        await wait_status(store, plain.id, RunStatus.COMPLETED)
        assert (await store.get_run(lacking.tenant_id, by_worker.id)).status is RunStatus.QUEUED
        worker.stop()
    # ...for a worker that has it, which runs the recorded stack.
    await anyio.Path(trace).unlink()
    async with anyio.create_task_group() as tg:
        worker = Worker(Harness(store, settings={}), concurrency=1, lease_seconds=5)
        await tg.start(worker.run)
        await wait_status(store, by_worker.id, RunStatus.COMPLETED)
        worker.stop()
    assert await traced(trace) == ["audit_log"]


async def wait_status(store: RunStore, run_id: uuid.UUID, status: RunStatus) -> None:
    with anyio.fail_after(20):
        while (await store.get_run(DEFAULT_TENANT, run_id)).status is not status:  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def cli(*args: str, plugins: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real ``hango`` command in a process of its own (it runs its own event loop and
    signal handlers), seeing the test distributions installed under ``plugins``."""
    env = {**os.environ, "NO_COLOR": "1"}
    if plugins is not None:
        env["PYTHONPATH"] = str(plugins)
    done = await anyio.run_process([HANGO, *args], env=env, check=False)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


async def traced(path: Path) -> list[str]:
    apath = anyio.Path(path)
    return (await apath.read_text()).split() if await apath.exists() else []


# -- middleware objects and agents defined in Python ------------------------------------------


class Recorder:
    """An in-process middleware: counts model calls in ``calls``."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls = 0

    async def wrap_model_call(self, req: Any, next: Any) -> Any:
        self.calls += 1
        return await next(req)


@pytest.mark.anyio
async def test_harness_middleware_objects_join_the_default_stack(
    tracers: None, tmp_path: Path, trace: Path, store: RunStore
) -> None:
    recorder = Recorder()
    agent = AgentDefinition.from_file(agent_file(tmp_path, 'middleware = ["shout"]'))
    harness = Harness(store, middleware=[recorder], settings={})
    finished = await harness.run(agent, "hi")
    assert finished.status is RunStatus.COMPLETED and recorder.calls == 1
    record = await store.get_run(harness.tenant_id, finished.run_id)
    names = [(e["name"], e["distribution"]) for e in record.config["stack"]]
    # After the agent's own, still inside the agent slot: before memory and the allowlist.
    assert names[-8:] == [
        ("shout", "hango-shout"),
        ("recorder", "<in-process>"),
        ("model_fallback", "hango-fallback"),
        ("prompt_cache", "hango-prompt-cache"),
        ("memory", "hango-recall"),
        ("human_in_the_loop", "hango-approval"),
        ("tool_retry", "hango-retry"),
        ("tool_allowlist", "hango-allowlist"),
    ]
    # A harness without the object cannot continue such a run; one with it can.
    queued = await harness.start(agent, "again", status=RunStatus.QUEUED)
    with pytest.raises(RunNotResumable, match="'recorder' given as a Python object"):
        await Harness(store, settings={}).execute(queued.id)
    done = await Harness(store, middleware=[Recorder()], settings={}).execute(queued.id)
    assert done.status is RunStatus.COMPLETED


@pytest.mark.anyio
async def test_an_agent_of_python_objects_runs_on_core_alone_and_resumes_in_its_process(
    store: RunStore, tmp_path: Path
) -> None:
    seen: list[int] = []

    def double(n: int) -> str:
        """Double an integer."""
        seen.append(n)
        return str(2 * n)

    model = ScriptedModel.from_turns(
        [
            {"text": "doubling", "tool_calls": [{"name": "double", "input": {"n": 21}}]},
            {"text": "42"},
        ]
    )
    recorder = Recorder()
    agent = AgentDefinition(name="py", model=model, tools=[double], middleware=[recorder])
    assert not agent.portable
    core_only = make_plugin_manager(load_entrypoints=False)
    harness = Harness(store, plugins=core_only, settings={})
    finished = await harness.run(agent, "double 21")
    assert (finished.status, seen, recorder.calls) == (RunStatus.COMPLETED, [21], 2)
    stored = (
        await store.get_agent(
            harness.tenant_id, (await store.list_runs(harness.tenant_id))[0].agent_id
        )
    ).definition
    assert stored["model"] == "in-process:ScriptedModel"
    assert stored["tools"] == ["in-process:double"]

    with pytest.raises(ConfigError, match="holds Python objects"):
        await harness.start(agent, "queue me", status=RunStatus.QUEUED)

    run = await harness.start(agent, "double 21")
    with pytest.raises(RunNotResumable, match="model ScriptedModel"):
        await Harness(store, plugins=core_only, settings={}).execute(run.id)
    other = await Harness(store, plugins=core_only, settings={}).execute(run.id, agent=agent)
    assert other.status is RunStatus.COMPLETED and seen == [21, 21]


def test_the_demo_agent_runs_on_core_alone(tmp_path: Path) -> None:
    demo = Path(__file__).resolve().parents[1] / "examples" / "demo" / "agent.toml"
    env = {
        **os.environ,
        "HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}",
        # every installed plugin, and a name that is none: one warning line each
        "HANGO_DISABLE_PLUGINS": "todo,repeat,allowlist,repair,fallback,prompt_cache,"
        "approval,limits,retry,nonesuch",
    }
    done = subprocess.run(
        [HANGO, "run", "--agent", str(demo), "--json", "What are the open risks?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert any("write_todos" in w and "nothing provides" in w for w in warnings), done.stderr
    assert any("nonesuch" in w for w in warnings), done.stderr
    assert "Warning:" not in done.stderr  # no Python-format warning lines


# -- the model and usage of a run -------------------------------------------------------------


@pytest.mark.anyio
async def test_a_run_continues_on_the_model_it_started_with(
    tmp_path: Path, store: RunStore
) -> None:
    await anyio.Path(tmp_path / "other.toml").write_text(
        '[[turns]]\ntext = "from the other model"\n'
    )
    agent = AgentDefinition.from_file(agent_file(tmp_path, ""))
    starter = Harness(store, model_spec="scripted:other.toml", settings={})
    run = await starter.start(agent, "hi", status=RunStatus.QUEUED)
    assert (run.config["model"], run.config["base_url"]) == ("scripted:other.toml", None)
    # Another process (a fresh harness, as `hango resume` and workers make) uses it.
    finished = await Harness(store, settings={}).execute(run.id)
    assert finished.status is RunStatus.COMPLETED
    messages = await store.load_messages(starter.tenant_id, run.session_id)
    assert messages[-1].text == "from the other model"

    # Changing it takes the explicit flag.
    await anyio.Path(tmp_path / "third.toml").write_text('[[turns]]\ntext = "third"\n')
    again = await starter.start(agent, "hi", status=RunStatus.QUEUED)
    db = f"sqlite:///{tmp_path / 'hango.db'}"
    third = str(tmp_path / "third.toml")
    result = await cli("resume", str(again.id), "--db", db, "--model", f"scripted:{third}")
    assert result.returncode == 0, result.stderr
    messages = await store.load_messages(starter.tenant_id, again.session_id)
    assert messages[-1].text == "third"


class FailsSecond:
    """Answers with a tool call, then fails (until ``healed``): usage of the first call must
    survive the failure and be summed with the resumed run's."""

    name = "fails-second"

    def __init__(self) -> None:
        self.healed = False

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        assistant = sum(m.role == "assistant" for m in request.messages)
        if assistant == 0:
            yield TextDelta(0, "first")
            yield MessageStop(StopReason.PAUSE_TURN, Usage(100, 10))
        elif not self.healed:
            raise ModelError("overloaded")
        else:
            yield TextDelta(0, "second")
            yield MessageStop(StopReason.END_TURN, Usage(200, 20))


@pytest.mark.anyio
async def test_usage_is_kept_by_a_failed_run_and_summed_across_resumes(
    tmp_path: Path, store: RunStore
) -> None:
    model = FailsSecond()
    harness = Harness(store, model=model, settings={})
    agent = AgentDefinition.from_file(agent_file(tmp_path, ""))
    failed = await harness.run(agent, "hi")
    assert failed.status is RunStatus.FAILED and failed.usage == Usage(100, 10)
    db = f"sqlite:///{tmp_path / 'hango.db'}"
    shown = await cli("runs", "show", str(failed.run_id), "--json", "--db", db)
    assert json.loads(shown.stdout)["usage"]["input_tokens"] == 100
    model.healed = True
    done = await harness.execute(failed.run_id)
    assert done.status is RunStatus.COMPLETED and done.usage == Usage(300, 30)


def test_a_plugin_hook_that_raises_or_returns_no_middleware_names_itself(
    install: Install, tmp_path: Path
) -> None:
    body = (
        "import hango.middleware\n\n@hango.middleware.hookimpl\n"
        "def hango_middleware(config):\n    return {ret}\n"
    )
    install("hango-odd", "odd", "x", body=body.format(ret="'not a middleware'"))
    pm = make_plugin_manager(env={})
    with pytest.warns(PluginWarning, match="left out"):
        resolve_stack(StackConfig(), pm)
    text = pm.failures["odd"]
    assert "plugin 'odd'" in text and "hango-odd" in text and "entry point odd =" in text
    assert "'not a middleware', which is not a middleware" in text


def test_a_plugin_hook_that_raises_is_one_line_at_the_command_line(
    install: Install, tmp_path: Path
) -> None:
    body = (
        "import hango.middleware\n\n@hango.middleware.hookimpl\ndef hango_middleware(config):\n"
        "    raise ValueError('bad wiring')\n"
    )
    install("hango-boom", "boom", "x", body=body)
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # as outside pytest: shown, not raised
        result = CliRunner().invoke(main, ["plugins", "--json"])
    assert "warning: left out: plugin 'boom'" in result.stderr
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["boom"]["slot"] == "failed" and rows["boom"]["distribution"] == "hango-boom"
    error = rows["boom"]["error"]
    assert error.startswith("plugin 'boom' (entry point boom = hangotest_hango_boom)")
    assert "hango-boom: hango_middleware raised ValueError: bad wiring" in error
    assert "HANGO_DISABLE_PLUGINS=boom" in error
    assert rows["todo"]["error"] is None  # the others are listed as usual
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "source",
    ["def broken(:\n", "raise RuntimeError('no config here')\n", "import sys\nsys.exit(3)\n"],
)
def test_a_tool_module_that_fails_at_import_is_one_line(tmp_path: Path, source: str) -> None:
    (tmp_path / "bad_tools.py").write_text(source)
    path = agent_file(tmp_path, 'tools = ["bad_tools:TOOLS"]')
    db = f"sqlite:///{tmp_path / 'hango.db'}"
    result = CliRunner().invoke(main, ["run", "--agent", str(path), "--db", db, "hi"])
    assert result.exit_code == 2, result.output
    assert "tools[0] = 'bad_tools:TOOLS': importing bad_tools failed" in result.output
    assert "Traceback" not in result.output


NONE_WRAPPER = """
import hango.middleware

class ReturnsNothing:
    name = "returns_nothing"

    async def wrap_model_call(self, req, next):
        await next(req)

@hango.middleware.hookimpl
def hango_middleware(config):
    return ReturnsNothing()
"""


@pytest.mark.anyio
async def test_a_failing_middleware_is_named_with_its_distribution(
    install: Install, tmp_path: Path, store: RunStore
) -> None:
    install("hango-nothing", "nothing", "returns_nothing", body=NONE_WRAPPER)
    agent = AgentDefinition.from_file(agent_file(tmp_path, 'middleware = ["returns_nothing"]'))
    finished = await Harness(store, settings={}).run(agent, "hi")
    assert finished.status is RunStatus.FAILED
    assert finished.error is not None
    assert "'returns_nothing'" in finished.error
    assert "distribution hango-nothing 1.2.3" in finished.error
    assert "None" in finished.error and "AttributeError" not in finished.error
