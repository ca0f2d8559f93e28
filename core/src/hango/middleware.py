"""The middleware author's API: everything a middleware plugin needs, and nothing else.

A plugin imports from two places only: ``hango`` (messages, models, tools, errors shared with
applications) and this module (the contract a middleware implements and the helpers it calls).
Where a name lives inside hango is private and may move; these names do not. Each one is
listed, with one line, in docs/reference/api.md.

- Capabilities: ``Middleware`` (the marker: a ``name``), ``ModelWrapper``, ``ToolWrapper``,
  ``RunHook``, ``ToolProvider``, ``PromptContributor``.
- Requests and handlers: ``ModelRequest`` / ``ModelHandler``, ``ToolCallRequest`` /
  ``ToolHandler``. Rewrite a request with ``attrs.evolve`` and pass the new one to ``next``.
- Interrupts and decisions: ``ToolCallRequest.interrupt(...)`` suspends a run for a person's
  ``Decision`` (``DECISIONS``: approve, edit, reject, respond); ``Interrupt`` is the pause
  (a ``BaseException``: never swallow it), ``InterruptError`` a misuse.
- State: ``State``, ``Todo`` / ``TodoStatus``, ``load_private`` / ``store_private`` (typed,
  through hango's one converter), ``StateScope`` / ``STATE_SCOPES`` for a class attribute
  ``state_scope = "session"``, ``held_calls`` (calls a resumed run finishes itself).
- Storable content: ``replace_lone_surrogates``, ``storable_result``.
- Settings: ``StackConfig`` (the hook's argument); ``int_setting``, ``float_setting`` and
  ``duration_setting`` parse ``HANGO_*`` defaults, raising ``ConfigError`` naming the variable.
- Telemetry: ``record(event, middleware=..., reason=..., attributes=...)`` and the event and
  attribute names it takes.
- Errors a middleware raises or reports: ``ConfigError``, ``MiddlewareError``, ``StateError``.
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
from hango.agent.loop import held_calls
from hango.agent.middleware import (
    Middleware,
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
from hango.agent.state import (
    STATE_SCOPES,
    State,
    StateError,
    StateScope,
    Todo,
    TodoStatus,
    load_private,
    store_private,
)
from hango.agent.storable import replace_lone_surrogates, storable_result
from hango.config import ConfigError, StackConfig, duration_setting, float_setting, int_setting
from hango.hookspecs import hookimpl
from hango.run.runner import executing_harness
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
    "ERROR_TYPE",
    "PROVIDER_NAME",
    "REPEAT_CALL_BLOCKED",
    "REQUEST_MODEL",
    "REQUEST_REWRITTEN",
    "RETRIED",
    "SHORT_CIRCUITED",
    "STATE_SCOPES",
    "TOOL_CALL_ID",
    "TOOL_NAME",
    "ConfigError",
    "Decision",
    "DecisionType",
    "Interrupt",
    "InterruptError",
    "Middleware",
    "MiddlewareError",
    "ModelHandler",
    "ModelRequest",
    "ModelWrapper",
    "PendingAction",
    "PromptContributor",
    "RunHook",
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
    "argument_digest",
    "duration_setting",
    "executing_harness",
    "float_setting",
    "held_calls",
    "hookimpl",
    "int_setting",
    "load_private",
    "provider_name",
    "record",
    "replace_lone_surrogates",
    "storable_result",
    "store_private",
]
