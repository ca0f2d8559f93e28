"""The agent: the middleware contract, the run's state, the chain and the loop.

What each module holds, bottom to top:

- ``state``: ``State`` (what a run carries between turns), the typed private-state accessors,
  the state scopes, the ``runs.state_json`` document.
- ``interrupts``: pausing a run for a person's decision (records, their telemetry, binding
  decisions to questions).
- ``middleware``: the contract: the capability protocols, ``ModelRequest`` /
  ``ToolCallRequest`` and their handlers.
- ``onion`` and ``blame``: how wrappers are bound into an onion, and naming the middleware
  that broke the contract (``MiddlewareError``).
- ``chain``: ``Chain``, the ordered middlewares partitioned by capability.
- ``stack``: ``STACK_ORDER``, the one place the chain's order is decided.
- ``events``: what a run emits; ``storable``: content as history keeps it; ``spans`` and
  ``span_content``: the run's telemetry spans.
- ``definition``: ``AgentDefinition``, an agent file read and validated.
- ``loop``: ``run_loop``, one pass of a run: model calls, tool batches, checkpoints.

Applications use ``hango``, middleware authors ``hango.middleware``; these modules are the
implementation behind both facades.
"""
