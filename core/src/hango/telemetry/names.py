"""Every name hango's telemetry records under: span attributes, span events, span and metric names.

Span names and ``gen_ai.*`` attributes follow the OpenTelemetry GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/); ``hango.*`` names and the
``agent.*`` / ``middleware.*`` events come from the middleware-chain spec. Each is described in
``docs/reference/telemetry.md``. This module imports nothing, so every layer of hango (the
providers included) can name what it records without importing the rest of telemetry.
"""

from __future__ import annotations

from typing import Final

# -- attribute names ---------------------------------------------------------------------

MIDDLEWARE_NAME: Final = "hango.middleware.name"
MIDDLEWARE_NAMES: Final = "hango.middleware.names"
REASON: Final = "hango.reason"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
INTERRUPT_ID: Final = "hango.interrupt.id"
INTERRUPT_NAME: Final = "hango.interrupt.name"
INTERRUPT_DECISION: Final = "hango.interrupt.decision"
ERROR_TYPE: Final = "error.type"
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
RESPONSE_ID: Final = "gen_ai.response.id"
RESPONSE_MODEL: Final = "gen_ai.response.model"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
# Content, recorded only when OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is on.
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
TODOS_TOTAL: Final = "hango.todos.total"
TODOS_PENDING: Final = "hango.todos.pending"
TODOS_IN_PROGRESS: Final = "hango.todos.in_progress"
TODOS_COMPLETED: Final = "hango.todos.completed"
# Langfuse shows ``langfuse.observation.metadata.*`` attributes as the observation's metadata.
LANGFUSE_TODOS_TOTAL: Final = "langfuse.observation.metadata.todos_total"
LANGFUSE_TODOS_COMPLETED: Final = "langfuse.observation.metadata.todos_completed"

# -- events (from the middleware-chain spec) ---------------------------------------------

MIDDLEWARE_STACK: Final = "agent.middleware_stack"
REQUEST_REWRITTEN: Final = "middleware.request_rewritten"
SHORT_CIRCUITED: Final = "middleware.short_circuited"
RETRIED: Final = "middleware.retried"
REPEAT_CALL_BLOCKED: Final = "middleware.repeat_call_blocked"
STATE_MISSING: Final = "middleware.state_missing"
TODOS_UPDATED: Final = "agent.todos_updated"
# A middleware paused a run for a decision / a person decided / the resumed run read it.
INTERRUPT_RAISED: Final = "agent.interrupt_raised"
INTERRUPT_DECIDED: Final = "agent.interrupt_decided"
INTERRUPT_RESUMED: Final = "agent.interrupt_resumed"

# -- run, turn and agent attributes (the ``invoke_agent`` and ``turn`` spans) ------------

RUN_ID: Final = "hango.run.id"
TURN: Final = "hango.turn"
AGENT_NAME: Final = "gen_ai.agent.name"
AGENT_ID: Final = "gen_ai.agent.id"
CONVERSATION_ID: Final = "gen_ai.conversation.id"

# -- provider retries (``provider.retry`` events on the ``chat`` span) -------------------

PROVIDER_RETRY: Final = "provider.retry"
HTTP_STATUS_CODE: Final = "http.response.status_code"
RETRY_ATTEMPT: Final = "hango.retry.attempt"
RETRY_DELAY_S: Final = "hango.retry.delay_s"

# -- span names hango opens besides ``chat``, ``execute_tool`` and ``invoke_agent`` -------

BEFORE_RUN_SPAN: Final = "agent.before_run"
DIAGNOSE_SPAN: Final = "middleware.diagnose"
DECIDE_RUN_SPAN: Final = "decide_run"

# -- metric names -------------------------------------------------------------------------

BEFORE_RUN_DURATION_METRIC: Final = "hango.middleware.before_run.duration"
TOOL_SHORT_CIRCUITS_METRIC: Final = "hango.middleware.tool_short_circuits"
REPEAT_BLOCKED_METRIC: Final = "hango.middleware.repeat_blocked"
OPERATION_DURATION_METRIC: Final = "gen_ai.client.operation.duration"
TOKEN_USAGE_METRIC: Final = "gen_ai.client.token.usage"
