"""hango: an agent harness in which every feature is a middleware.

The public names: messages and models (``hango.provider``), tools (``hango.tool``), the
middleware contract and chain (``hango.agent``), plugins (``hango.hookspecs``), runs and
stores (``hango.run``, ``hango.store``).
"""

from hango.agent.chain import Chain, MiddlewareError
from hango.agent.decisions import DecisionRefused
from hango.agent.definition import AgentDefinition, AgentFileError
from hango.agent.events import (
    AttemptDiscarded,
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
from hango.agent.interrupts.records import (
    Decision,
    Interrupt,
    InterruptError,
    PendingAction,
    argument_digest,
)
from hango.agent.loop import LoopSettings, held_calls, run_loop
from hango.agent.middleware import (
    Middleware,
    ModelHandler,
    ModelRequest,
    ModelWrapper,
    PromptContributor,
    RunHook,
    ToolCallRequest,
    ToolHandler,
    ToolProvider,
    ToolWrapper,
)
from hango.agent.stack import AGENT_SLOT, STACK_ORDER
from hango.agent.state import (
    State,
    StateError,
    Todo,
    dump_state,
    load_private,
    load_state,
    store_private,
)
from hango.config import ConfigError, StackConfig
from hango.discovery import default_stack, resolve_stack
from hango.hookspecs import hookimpl
from hango.plugins import PluginError, make_plugin_manager
from hango.provider import (
    JSON,
    Block,
    Message,
    Model,
    ModelError,
    ModelResponse,
    ModelSpecError,
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
from hango.run import Decided, Harness, RunNotResumable
from hango.store import RunStore, open_store
from hango.tool import Tool, ToolContext, ToolRegistry, ToolResult, ToolView, error_result, tool

__version__ = "0.1.0"

__all__ = [
    "AGENT_SLOT",
    "JSON",
    "STACK_ORDER",
    "AgentDefinition",
    "AgentFileError",
    "AttemptDiscarded",
    "Block",
    "Chain",
    "ConfigError",
    "Decided",
    "Decision",
    "DecisionRefused",
    "Event",
    "Harness",
    "Interrupt",
    "InterruptError",
    "InterruptRaised",
    "LoopSettings",
    "Message",
    "MessageCompleted",
    "Middleware",
    "MiddlewareError",
    "Model",
    "ModelError",
    "ModelHandler",
    "ModelRequest",
    "ModelResponse",
    "ModelSpecError",
    "ModelWrapper",
    "PendingAction",
    "PluginError",
    "PromptContributor",
    "ProviderRetry",
    "Request",
    "RunFinished",
    "RunHook",
    "RunNotResumable",
    "RunStarted",
    "RunStatus",
    "RunStore",
    "ScriptError",
    "ScriptedModel",
    "ServerBlock",
    "StackConfig",
    "State",
    "StateError",
    "StopReason",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "Todo",
    "TodosUpdated",
    "Tool",
    "ToolCallFinished",
    "ToolCallRequest",
    "ToolCallStarted",
    "ToolChoice",
    "ToolContext",
    "ToolHandler",
    "ToolProvider",
    "ToolRegistry",
    "ToolResult",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "ToolView",
    "ToolWrapper",
    "TurnFinished",
    "Usage",
    "argument_digest",
    "default_stack",
    "dump_state",
    "error_result",
    "held_calls",
    "hookimpl",
    "load_private",
    "load_state",
    "make_plugin_manager",
    "model_from_spec",
    "open_store",
    "resolve_stack",
    "run_loop",
    "store_private",
    "tool",
]
