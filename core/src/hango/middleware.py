"""The middleware author's API: everything a middleware plugin needs, and nothing else.

A plugin imports from two places only: ``hango`` (messages, models, tools, errors shared with
applications) and this module (the contract a middleware implements and the helpers it calls).
Where a name lives inside hango is private and may move; these names do not. Each one is
listed, with one line, in docs/reference/api.md.

- Capabilities: ``Middleware`` (the marker: a ``name``), ``ModelWrapper``, ``ToolWrapper``,
  ``RunHook``, ``ToolProvider``, ``PromptContributor``.
- Requests and handlers: ``ModelRequest`` / ``ModelHandler`` (``ModelCallPurpose`` /
  ``MODEL_CALL_PURPOSES``: a turn or a middleware's own summary call), ``ToolCallRequest`` /
  ``ToolHandler``. Rewrite a request with ``attrs.evolve`` and pass the new one to ``next``.
- Interrupts and decisions: ``ToolCallRequest.interrupt(...)`` suspends a run for a person's
  ``Decision`` (``DECISIONS``: approve, edit, reject, respond); ``Interrupt`` is the pause
  (a ``BaseException``: never swallow it), ``InterruptError`` a misuse.
- State: ``State``, ``Todo`` / ``TodoStatus``, ``load_private`` / ``store_private`` (typed,
  through hango's one converter), ``StateScope`` / ``STATE_SCOPES`` for a class attribute
  ``state_scope = "session"``, ``held_calls`` (calls a resumed run finishes itself),
  ``pending_calls`` (the calls of an unfinished batch that have no result yet),
  ``HistoryMark`` / ``mark_history`` (where the session's history loads from, after a
  compaction), ``narrow_tools`` / ``tool_narrowing`` (the tools a run is narrowed to,
  enforced by the allowlist).
- Storable content: ``replace_lone_surrogates``, ``storable_result``.
- Structured output: ``proposed_output`` (what a response offers as the run's output),
  ``reject_output`` (an output validator's refusal, with the reason), ``FINAL_ANSWER``.
- Settings: ``StackConfig`` (the hook's argument); ``int_setting``, ``float_setting`` and
  ``duration_setting`` parse ``HANGO_*`` defaults, raising ``ConfigError`` naming the variable.
- Telemetry: ``record(event, middleware=..., reason=..., attributes=...)`` and the event and
  attribute names it takes.
- Errors a middleware raises or reports: ``ConfigError``, ``MiddlewareError``, ``StateError``;
  ``HangoWarning``, the base of warnings the ``hango`` command prints as one line.
- Memory (hango's database, migration 0007): ``run_memory()`` (the running run's store and
  agent), ``memory_store(run_store)`` (for commands), ``MemoryStore`` and its records
  (``MemoryEntry``, ``MemoryVersion``, ``MemoryEdit``, ``MemoryWritten``, ``Provenance``),
  ``MemoryConflict``, ``search_entries``; ``Config`` (the database URL and tenant of the
  environment, as ``hango`` reads them).
- Workspace storage: ``workspace_blobs(state)`` gives the ``WorkspaceBlobs`` of the run's
  session in hango's own database (content by SHA-256, ``digest_of``), None outside a run.
- Runs: ``executing_harness()``, the ``Harness`` executing the calling run (a sub-agent starts
  its child runs through it).
- Plugins: ``hookimpl`` marks the ``hango_middleware`` / ``hango_options_schema`` /
  ``hango_cli_commands`` hooks.
"""

from hango.agent.blame import MiddlewareError
from hango.agent.interrupts.records import (
    DECISIONS,
    Decision,
    DecisionType,
    Interrupt,
    InterruptError,
    PendingAction,
    argument_digest,
)
from hango.agent.loop import held_calls, pending_calls
from hango.agent.middleware import (
    MODEL_CALL_PURPOSES,
    Middleware,
    ModelCallPurpose,
    ModelHandler,
    ModelRequest,
    ModelWrapper,
    PromptContributor,
    RunHook,
    ToolCallRequest,
    ToolChecker,
    ToolHandler,
    ToolProvider,
    ToolWrapper,
)
from hango.agent.output import FINAL_ANSWER, proposed_output, reject_output
from hango.agent.state import (
    STATE_SCOPES,
    HistoryMark,
    State,
    StateError,
    StateScope,
    Todo,
    TodoStatus,
    load_private,
    mark_history,
    narrow_tools,
    store_private,
    tool_narrowing,
)
from hango.agent.storable import replace_lone_surrogates, storable_result
from hango.config import (
    Config,
    ConfigError,
    HangoWarning,
    StackConfig,
    duration_setting,
    float_setting,
    int_setting,
)
from hango.hookspecs import hookimpl
from hango.run.runner import executing_harness
from hango.store.memory import (
    EDIT_MODES,
    EditMode,
    MemoryConflict,
    MemoryEdit,
    MemoryEntry,
    MemoryStore,
    MemoryVersion,
    MemoryWritten,
    Provenance,
    RunMemory,
    memory_store,
    run_memory,
    search_entries,
)
from hango.store.workspace import WorkspaceBlobs, digest_of, workspace_blobs
from hango.telemetry import (
    ERROR_TYPE,
    PROVIDER_NAME,
    REPEAT_CALL_BLOCKED,
    REQUEST_MODEL,
    REQUEST_REWRITTEN,
    RETRIED,
    SHORT_CIRCUITED,
    TOOL_CALL_ID,
    TOOL_NAME,
    provider_name,
    record,
)

__all__ = [
    "DECISIONS",
    "EDIT_MODES",
    "ERROR_TYPE",
    "FINAL_ANSWER",
    "MODEL_CALL_PURPOSES",
    "PROVIDER_NAME",
    "REPEAT_CALL_BLOCKED",
    "REQUEST_MODEL",
    "REQUEST_REWRITTEN",
    "RETRIED",
    "SHORT_CIRCUITED",
    "STATE_SCOPES",
    "TOOL_CALL_ID",
    "TOOL_NAME",
    "Config",
    "ConfigError",
    "Decision",
    "DecisionType",
    "EditMode",
    "HangoWarning",
    "HistoryMark",
    "Interrupt",
    "InterruptError",
    "MemoryConflict",
    "MemoryEdit",
    "MemoryEntry",
    "MemoryStore",
    "MemoryVersion",
    "MemoryWritten",
    "Middleware",
    "MiddlewareError",
    "ModelCallPurpose",
    "ModelHandler",
    "ModelRequest",
    "ModelWrapper",
    "PendingAction",
    "PromptContributor",
    "Provenance",
    "RunHook",
    "RunMemory",
    "StackConfig",
    "State",
    "StateError",
    "StateScope",
    "Todo",
    "TodoStatus",
    "ToolCallRequest",
    "ToolChecker",
    "ToolHandler",
    "ToolProvider",
    "ToolWrapper",
    "WorkspaceBlobs",
    "argument_digest",
    "digest_of",
    "duration_setting",
    "executing_harness",
    "float_setting",
    "held_calls",
    "hookimpl",
    "int_setting",
    "load_private",
    "mark_history",
    "memory_store",
    "narrow_tools",
    "pending_calls",
    "proposed_output",
    "provider_name",
    "record",
    "reject_output",
    "replace_lone_surrogates",
    "run_memory",
    "search_entries",
    "storable_result",
    "store_private",
    "tool_narrowing",
    "workspace_blobs",
]
