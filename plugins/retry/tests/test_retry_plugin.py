"""hango-retry: the plugin and its options table; what is retried (configured exception types)
and what never is (validation errors, a tool's own error result, non-idempotent tools,
cancellation); backoff with jitter, the attempt and time bounds, ``middleware.retried``
events; a run killed mid-retry and resumed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span

import hango_retry
from hango import (
    ConfigError,
    Decision,
    RunStatus,
    Tool,
    ToolContext,
    ToolResult,
    ToolSpec,
    ToolUseBlock,
    error_result,
    telemetry,
    tool,
)
from hango.agent.blame import MiddlewareError
from hango.agent.chain import Chain
from hango.agent.stack import STACK_ORDER
from hango.discovery import check_options
from hango.middleware import StackConfig, ToolCallRequest, ToolHandler
from hango.plugins import make_plugin_manager
from hango.store.sqlite import SqliteRunStore
from hango.testing import HangoCli, agent_harness, assert_installed, kill_when, new_state
from hango_approval import HumanInTheLoopMiddleware
from hango_limits import LimitPolicy, LimitsMiddleware
from hango_retry import RetryPolicy, ToolRetryMiddleware


class Flaky:
    """A tool raising ``errors`` in turn (an exception class, or None to succeed)."""

    def __init__(self, *errors: type[BaseException] | None, idempotent: bool = True) -> None:
        self.errors = list(errors)
        self.attempts = 0
        self.idempotent = idempotent
        self.spec = ToolSpec("flaky", "A flaky tool.", {"type": "object"})

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.attempts += 1
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error(f"attempt {self.attempts} failed")
        return ToolResult(f"ok after {self.attempts}")


class Clock:
    """A clock the fake sleep advances, so the time bound is exercised without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def execute(req: ToolCallRequest) -> ToolResult:
    assert req.tool is not None
    return await req.tool.call(dict(req.call.input), ToolContext(req.state, req.call))


class Inner:
    """A pass-through wrapper inside the retry one, as the allowlist is in a real stack: the
    chain hands the retry middleware a bound layer, not a coroutine function."""

    name = "inner"

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        return await next(req)


async def call_through(
    policy: RetryPolicy, tool_: Tool | None, clock: Clock | None = None, name: str = "flaky"
) -> ToolResult:
    """One call through a real chain (its innermost guard turns raises into results)."""
    clock = clock or Clock()
    chain = Chain.build([ToolRetryMiddleware(policy, sleep=clock.sleep, clock=clock), Inner()])
    req = ToolCallRequest(ToolUseBlock("c1", name, {}), tool_, new_state())
    return await chain.tool_call(req, execute)


def policy(**options: Any) -> RetryPolicy:
    return RetryPolicy.from_options(options)


# -- the plugin and its options --------------------------------------------------------------


def test_installed_through_entry_point() -> None:
    placed = assert_installed("retry", "hango-retry", hango_retry, middleware="tool_retry")
    assert STACK_ORDER.index("human_in_the_loop") < placed.slot
    assert placed.slot < STACK_ORDER.index("tool_allowlist")
    assert placed.capabilities == ("tool_wrapper",)
    assert isinstance(placed.middleware, ToolRetryMiddleware)
    assert placed.middleware.policy == RetryPolicy()


def test_a_valid_table_is_accepted_and_read() -> None:
    table = {
        "retry_on": ["OSError", "json.JSONDecodeError"],
        "max_attempts": 5,
        "max_seconds": 12.5,
        "initial_delay": 0.25,
        "max_delay": 4,
        "backoff": 3,
        "jitter": 0,
        "tools": ["fetch"],
        "retry_non_idempotent": True,
    }
    check_options({"tool_retry": table}, make_plugin_manager(env={}))
    assert RetryPolicy.from_options(table) == RetryPolicy(
        (OSError, json.JSONDecodeError), 5, 12.5, 0.25, 4.0, 3.0, 0.0, frozenset({"fetch"}), True
    )


@pytest.mark.parametrize(
    ("table", "field", "says"),
    [
        ({"max_attempts": 0}, "[options.tool_retry].max_attempts", "less than the minimum"),
        ({"max_seconds": 0}, "[options.tool_retry].max_seconds", "less than or equal"),
        ({"retry_on": ["Time Out"]}, "[options.tool_retry].retry_on[0]", "does not match"),
        ({"retry_on": []}, "[options.tool_retry].retry_on", "should be non-empty"),
        ({"jitter": "1s"}, "[options.tool_retry].jitter", "not of type 'number'"),
        ({"retries": 3}, "[options.tool_retry]", "'retries' was unexpected"),
    ],
)
def test_an_invalid_table_names_the_field(table: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_options({"tool_retry": table}, make_plugin_manager(env={}), source="agent 'a'")
    message = str(caught.value)
    assert message.startswith(f"agent 'a': {field}:") and says in message
    assert "hango-retry" in message


@pytest.mark.parametrize(
    ("name", "says"),
    [("json.NoSuchError", "does not import"), ("json.dumps", "is not an exception class")],
)
def test_an_exception_name_that_is_not_one_names_its_place(name: str, says: str) -> None:
    config = StackConfig(
        middleware_options={"tool_retry": {"retry_on": ["TimeoutError", name]}},
        source="agent 'a'",
    )
    with pytest.raises(ConfigError, match=r"^agent 'a': \[options.tool_retry\].retry_on\[1\]: "):
        hango_retry.hango_middleware(config=config)
    with pytest.raises(ConfigError, match=says):
        hango_retry.hango_middleware(config=config)


def test_environment_defaults_are_overridden_by_the_agent_file() -> None:
    settings = {
        "HANGO_TOOL_RETRY_ON": "OSError, ValueError",
        "HANGO_TOOL_RETRY_MAX_ATTEMPTS": "6",
        "HANGO_TOOL_RETRY_MAX_SECONDS": "9.5",
    }
    alone = hango_retry.hango_middleware(config=StackConfig(settings=settings)).policy
    assert (alone.retry_on, alone.max_attempts, alone.max_seconds) == (
        (OSError, ValueError),
        6,
        9.5,
    )
    table = {"retry_on": ["KeyError"], "max_attempts": 2}
    config = StackConfig(settings=settings, middleware_options={"tool_retry": table})
    mixed = hango_retry.hango_middleware(config=config).policy
    assert (mixed.retry_on, mixed.max_attempts, mixed.max_seconds) == ((KeyError,), 2, 9.5)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("HANGO_TOOL_RETRY_MAX_ATTEMPTS", "three", "must be an integer"),
        ("HANGO_TOOL_RETRY_MAX_SECONDS", "-1", "positive number of seconds"),
        ("HANGO_TOOL_RETRY_ON", "TimeoutError,NoSuchError", r"\[1\]: 'NoSuchError' does not"),
    ],
)
def test_an_invalid_environment_default_names_the_variable(
    name: str, value: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{name}") as caught:
        hango_retry.hango_middleware(config=StackConfig(settings={name: value}))
    assert caught.match(says)


# -- what is retried --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_configured_exception_is_retried_with_backoff_jitter_and_events(
    recording_span: Callable[[], AbstractContextManager[Span]], exporter: InMemorySpanExporter
) -> None:
    flaky, clock = Flaky(ConnectionResetError, ConnectionRefusedError, None), Clock()
    with recording_span():
        result = await call_through(
            policy(initial_delay=1, backoff=3, jitter=0.5, max_delay=60), flaky, clock
        )
    assert result == ToolResult("ok after 3") and flaky.attempts == 3
    # 1 then 3 seconds of backoff, each with up to 0.5 s of jitter on top.
    assert len(clock.sleeps) == 2
    assert 1 <= clock.sleeps[0] <= 1.5 and 3 <= clock.sleeps[1] <= 3.5
    (span,) = exporter.get_finished_spans()
    events = [dict(e.attributes or {}) for e in span.events if e.name == telemetry.RETRIED]
    assert events == [
        {
            telemetry.MIDDLEWARE_NAME: "tool_retry",
            telemetry.REASON: "tool raised",
            telemetry.TOOL_NAME: "flaky",
            telemetry.ERROR_TYPE: error,
            hango_retry.ATTEMPT_ATTRIBUTE: attempt,
        }
        for attempt, error in [(1, "ConnectionResetError"), (2, "ConnectionRefusedError")]
    ]


@pytest.mark.anyio
async def test_the_jitter_is_random_and_the_delay_capped() -> None:
    flaky, clock = Flaky(*[TimeoutError] * 6), Clock()
    result = await call_through(
        policy(max_attempts=7, max_seconds=1e6, initial_delay=1, max_delay=4, jitter=1),
        flaky,
        clock,
    )
    assert result == ToolResult("ok after 7")
    base = [1, 2, 4, 4, 4, 4]
    assert all(b <= s <= b + 1 for b, s in zip(base, clock.sleeps, strict=True))
    assert len({s - b for b, s in zip(base, clock.sleeps, strict=True)}) > 1


@pytest.mark.anyio
async def test_out_of_attempts_the_last_error_result_reaches_the_model() -> None:
    flaky = Flaky(TimeoutError, TimeoutError, TimeoutError, None)
    result = await call_through(policy(max_attempts=3), flaky)
    assert flaky.attempts == 3
    assert result.is_error and "TimeoutError: attempt 3 failed" in result.content


@pytest.mark.anyio
async def test_the_time_bound_stops_a_retry_that_would_end_past_it() -> None:
    flaky, clock = Flaky(*[TimeoutError] * 9), Clock()
    bounded = policy(max_attempts=10, max_seconds=4, initial_delay=1, backoff=2, jitter=0)
    result = await call_through(bounded, flaky, clock)
    # Waits of 1 and 2 end at t=3; the third (4 s) would end at t=7 > 4: not started.
    assert flaky.attempts == 3 and clock.sleeps == [1, 2]
    assert result.is_error


@pytest.mark.anyio
async def test_exception_types_not_configured_are_not_retried() -> None:
    flaky = Flaky(ValueError, None)
    result = await call_through(policy(), flaky)  # default: TimeoutError, ConnectionError
    assert flaky.attempts == 1 and result.is_error and "ValueError" in result.content
    flaky = Flaky(ValueError, None)
    assert (await call_through(policy(retry_on=["Exception"]), flaky)).content == "ok after 2"


@pytest.mark.anyio
async def test_only_the_listed_tools_are_retried() -> None:
    flaky = Flaky(TimeoutError, None)
    assert (await call_through(policy(tools=["other"]), flaky)).is_error
    assert flaky.attempts == 1


# -- what never is ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_non_idempotent_tool_is_retried_only_when_configured() -> None:
    flaky = Flaky(TimeoutError, None, idempotent=False)
    assert (await call_through(policy(), flaky)).is_error and flaky.attempts == 1
    flaky = Flaky(TimeoutError, None, idempotent=False)
    allowed = policy(retry_non_idempotent=True)
    assert (await call_through(allowed, flaky)).content == "ok after 2"


@pytest.mark.anyio
async def test_a_tools_own_error_result_and_an_unknown_tool_are_not_retried() -> None:
    attempts = 0

    class Refuses:
        spec = ToolSpec("flaky", "Refuses.", {"type": "object"})

        async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
            nonlocal attempts
            attempts += 1
            return error_result("no such record")

    everything = policy(retry_on=["BaseException"])
    assert (await call_through(everything, Refuses())).content == "no such record"
    assert attempts == 1

    async def unknown(req: ToolCallRequest) -> ToolResult:
        nonlocal attempts
        attempts += 1
        return error_result("unknown tool %r", req.call.name)

    chain = Chain.build([ToolRetryMiddleware(everything, sleep=Clock().sleep)])
    req = ToolCallRequest(ToolUseBlock("c1", "nowhere", {}), None, new_state())
    assert (await chain.tool_call(req, unknown)).is_error and attempts == 2


@tool
def typed(count: int) -> str:
    """Needs an integer."""
    raise TimeoutError("never reached with bad arguments")


@pytest.mark.anyio
async def test_arguments_that_fail_validation_are_not_retried(
    tmp_path: Path,
    recording_span: Callable[[], AbstractContextManager[Span]],
    exporter: InMemorySpanExporter,
) -> None:
    turns = [
        {"tool_calls": [{"name": "typed", "input": {"count": "three"}}]},
        {"tool_calls": [{"name": "typed", "input": {"count": 3}}]},
        {"text": "done"},
    ]
    clock = Clock()
    mw = ToolRetryMiddleware(policy(retry_on=["Exception"]), sleep=clock.sleep, clock=clock)
    async with agent_harness(tmp_path, turns=turns, stack=[mw], tools=[typed]) as h:
        with recording_span():
            finished = await h.run(h.agent, "go")
        record = await h.store.get_run(h.tenant_id, finished.run_id)
        messages = await h.store.load_messages(h.tenant_id, record.session_id)
    invalid, raised = messages[2].tool_results[0], messages[4].tool_results[0]
    assert "invalid arguments" in invalid.content
    assert "TimeoutError" in raised.content
    retried = [
        dict(e.attributes or {})[telemetry.TOOL_NAME]
        for s in exporter.get_finished_spans()
        for e in s.events
        if e.name == telemetry.RETRIED
    ]
    # Only the call that raised was retried (twice: three attempts in all).
    assert retried == ["typed", "typed"] and len(clock.sleeps) == 2


@pytest.mark.anyio
async def test_cancellation_is_never_retried() -> None:
    attempts = 0
    entered = anyio.Event()

    class Hangs:
        spec = ToolSpec("flaky", "Hangs.", {"type": "object"})

        async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
            nonlocal attempts
            attempts += 1
            entered.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    everything = policy(retry_on=["BaseException"])
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(call_through, everything, Hangs())
            await entered.wait()
            scope.cancel()
    assert scope.cancelled_caught and attempts == 1


@pytest.mark.anyio
async def test_a_cancel_during_the_backoff_wait_ends_the_call() -> None:
    flaky = Flaky(TimeoutError, None)
    waiting = anyio.Event()

    async def sleep(seconds: float) -> None:
        waiting.set()
        await anyio.sleep_forever()

    mw = ToolRetryMiddleware(policy(), sleep=sleep)
    chain = Chain.build([mw])
    req = ToolCallRequest(ToolUseBlock("c1", "flaky", {}), flaky, new_state())
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(chain.tool_call, req, execute)
            await waiting.wait()
            scope.cancel()
    assert scope.cancelled_caught and flaky.attempts == 1


@pytest.mark.anyio
async def test_a_wrapper_inside_returning_no_result_is_named_not_the_retry() -> None:
    class ReturnsNothing:
        name = "returns_nothing"

        async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
            await next(req)
            return None  # type: ignore[return-value]

    chain = Chain.build([ToolRetryMiddleware(policy(), sleep=Clock().sleep), ReturnsNothing()])
    req = ToolCallRequest(ToolUseBlock("c1", "flaky", {}), Flaky(None), new_state())
    with pytest.raises(MiddlewareError, match=r"^middleware 'returns_nothing' returned None"):
        await chain.tool_call(req, execute)


# -- in the pinned stack, with approval and limits -------------------------------------------


@pytest.mark.anyio
async def test_an_approved_call_retried_asks_once_and_counts_once(tmp_path: Path) -> None:
    """limits (outside), approval, retry (inside approval), as STACK_ORDER places them: the
    retried attempt runs on the one approval, and the budget counts one call."""
    attempts: list[str] = []

    @tool(idempotent=False)
    def charge(amount: int) -> str:
        """Charge a card; the network drops the first attempt."""
        attempts.append(f"charge {amount}")
        if len(attempts) == 1:
            raise ConnectionResetError("connection reset")
        return f"charged {amount}"

    clock = Clock()
    stack = [
        LimitsMiddleware(LimitPolicy.from_options({"run": {"per_tool": {"charge": 1}}})),
        HumanInTheLoopMiddleware({"charge": True}),
        ToolRetryMiddleware(
            policy(retry_non_idempotent=True, jitter=0), sleep=clock.sleep, clock=clock
        ),
    ]
    assert [m.name for m in stack] == sorted((m.name for m in stack), key=STACK_ORDER.index)
    charge_twice = {"tool_calls": [{"name": "charge", "input": {"amount": n}} for n in (5, 6)]}
    async with agent_harness(
        tmp_path, turns=[charge_twice, {"text": "done"}], stack=stack, tools=[charge]
    ) as h:
        first = await h.run(h.agent, "go")
        assert first.status is RunStatus.SUSPENDED
        asked = {a.tool_call_id: a for a in first.pending}
        assert len(asked) == 2 and attempts == []
        done = await h.resume(first.run_id, {call_id: Decision.approve() for call_id in asked})
        record = await h.store.get_run(h.tenant_id, first.run_id)
        messages = await h.store.load_messages(h.tenant_id, record.session_id)
    assert done.status is RunStatus.COMPLETED
    # The non-idempotent charge was retried in the same pass (allowed by the policy), on its
    # one approval; the second charge met the budget, which counts the retried one once.
    assert attempts == ["charge 5", "charge 5"] and clock.sleeps == [0.5]
    results = [(r.content, r.is_error) for r in messages[2].tool_results]
    assert results[0] == ("charged 5", False)
    assert results[1][1] and "limit of 1 call of tool 'charge' per run" in results[1][0]
    decided = record.state["interrupts"]["decided"]
    assert sorted(d["tool_call_id"] for d in decided) == sorted(asked)
    assert record.state["private"]["limits"]["run"]["per_tool"] == {"charge": 1}


# -- a kill and a resume --------------------------------------------------------------------


FLAKY_TOOLS = '''
import pathlib, time
from hango import tool

HERE = pathlib.Path(__file__).parent
LOG = HERE / "calls.log"

def log(text):
    with LOG.open("a") as f:
        f.write(text + "\\n")

@tool
def note(text: str) -> str:
    """Write a note."""
    log(text)
    return f"noted {text}"

@tool
def fetch() -> str:
    """Fetch, on a bad network: attempts 1 and 3 drop, attempt 2 hangs until killed."""
    attempt = sum(1 for line in LOG.read_text().split() if line.startswith("fetch"))  + 1
    log(f"fetch{attempt}")
    if attempt in (1, 3):
        raise ConnectionResetError("connection reset")
    while attempt == 2 and not (HERE / "fast").exists():
        time.sleep(0.05)
    return f"fetched on attempt {attempt}"
'''

#: Without history repair the resumed run finishes its interrupted batch itself.
NO_REPAIR = {"HANGO_DISABLE_PLUGINS": "repair"}

SCRIPT = """
[[turns]]
tool_calls = [{ name = "note", input = { text = "a" } }, { name = "fetch", input = {} }]
[[turns]]
text = "Finished."
"""

AGENT = """
name = "retrying"
model = "scripted:script.toml"
tools = ["flaky_tools:note", "flaky_tools:fetch"]

[options.tool_retry]
retry_on = ["ConnectionError"]
max_attempts = 2
initial_delay = 0
jitter = 0
"""


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_run_killed_mid_retry_resumes_the_call_with_a_fresh_budget(
    tmp_path: Path, agent_dir: Callable[..., Path], hango_cli: HangoCli
) -> None:
    """Killed during the retry of fetch: nothing of the retry was saved (no result, no
    attempt count), so the resumed run runs the call again with its whole attempt budget,
    and the note that finished before the kill is not run again."""
    agent_dir(agent=AGENT, script=SCRIPT, tools={"flaky_tools": FLAKY_TOOLS})
    log = tmp_path / "calls.log"
    proc = hango_cli("run", "--agent", "agent.toml", "go", env=NO_REPAIR)
    await kill_when(proc, log, "fetch2", never="the retry never started")

    (tmp_path / "fast").touch()
    store = await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}")
    async with store:
        (run,) = await store.list_runs(uuid.UUID(int=0))
    resumed = hango_cli("resume", "--force", str(run.id), env=NO_REPAIR)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert "Finished." in out
    assert log.read_text().split() == ["a", "fetch1", "fetch2", "fetch3", "fetch4"]
    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        done = await store.get_run(uuid.UUID(int=0), run.id)
        messages = await store.load_messages(uuid.UUID(int=0), done.session_id)
    assert done.status is RunStatus.COMPLETED
    results = [r.content for m in messages for r in m.tool_results]
    assert results == ["noted a", "fetched on attempt 4"]
