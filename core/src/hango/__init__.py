"""hango: an agent harness in which every feature is a middleware.

This is the application's API: run agents (``Harness``, ``AgentDefinition``, the stores), the
models and messages they exchange, the tools they call, the events a run emits, the decisions
a person makes on a suspended run, and the errors raised to the caller. A middleware author's
API is ``hango.middleware``. Every name is listed, one line each, in docs/reference/api.md;
anything not exported here or there lives in a module whose path may change.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from hango.agent.blame import MiddlewareError
from hango.agent.definition import AgentDefinition, AgentFileError
from hango.agent.events import (
    AttemptDiscarded,
    ContextCompacted,
    Event,
    InterruptRaised,
    MessageCompleted,
    RunFinished,
    RunStarted,
    RunStatus,
    TodosUpdated,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from hango.agent.interrupts.decide import DecisionRefused
from hango.agent.interrupts.records import Decision, PendingAction
from hango.agent.state import StateError
from hango.config import Config, ConfigError
from hango.plugins import PluginError
from hango.provider import (
    JSON,
    Block,
    Message,
    Model,
    ModelError,
    ModelResponse,
    ModelSpecError,
    OutputSpec,
    ProviderRetry,
    Request,
    ScriptedModel,
    ScriptError,
    ServerBlock,
    StopReason,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
    model_from_spec,
)
from hango.run import (
    Decided,
    Delivered,
    Engine,
    EngineError,
    Harness,
    RunNotResumable,
    StepResult,
)
from hango.store import RunBusy, RunRecord, RunSave, RunStore, StoreError, open_store
from hango.tool import Tool, ToolContext, ToolRegistry, ToolResult, ToolView, error_result, tool

try:
    __version__ = _version("hango")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "JSON",
    "AgentDefinition",
    "AgentFileError",
    "AttemptDiscarded",
    "Block",
    "Config",
    "ConfigError",
    "ContextCompacted",
    "Decided",
    "Decision",
    "DecisionRefused",
    "Delivered",
    "Engine",
    "EngineError",
    "Event",
    "Harness",
    "InterruptRaised",
    "Message",
    "MessageCompleted",
    "MiddlewareError",
    "Model",
    "ModelError",
    "ModelResponse",
    "ModelSpecError",
    "OutputSpec",
    "PendingAction",
    "PluginError",
    "ProviderRetry",
    "Request",
    "RunBusy",
    "RunFinished",
    "RunNotResumable",
    "RunRecord",
    "RunSave",
    "RunStarted",
    "RunStatus",
    "RunStore",
    "ScriptError",
    "ScriptedModel",
    "ServerBlock",
    "StateError",
    "StepResult",
    "StopReason",
    "StoreError",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "TodosUpdated",
    "Tool",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolChoice",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "ToolView",
    "TurnFinished",
    "Usage",
    "error_result",
    "model_from_spec",
    "open_store",
    "tool",
]
