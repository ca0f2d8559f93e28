"""Interrupts: a middleware pauses a run for a person's decision about one tool call.

Where each part lives: ``records`` (the records, ids and exceptions, persisted with the
run's state), ``trace`` (their telemetry events), ``decide`` (binding a person's decisions to
the open questions); ``ToolCallRequest.interrupt`` (``hango.agent.middleware``) asks, the
loop (``hango.agent.loop``) pauses and resumes the batch, ``hango.run.decide`` saves
decisions to the store and ``hango.cli.decisions`` parses and prints them.

From ``wrap_tool_call``, before it calls ``next``, a middleware calls
``req.interrupt(middleware, name, reason=...)``. The first time, that raises ``Interrupt``: the
loop records the pending action (``PendingAction``) in the run's state, asks the batch's later
calls whether they would pause too (without running them), and the run ends the pass as
``suspended``. Once every pending action has a ``Decision`` (``Harness.decide``), the run goes
on from the same unfinished batch; the same ``req.interrupt`` call now returns the decision and
the middleware acts on it.

- ``Interrupt`` is a ``BaseException``: an ``except Exception`` in a wrapper (a retry, an error
  mapper) cannot turn a pause into an error result, and neither can the chain's innermost guard.
- Interrupt ids are a UUID5 of (run id, tool call id, middleware, interrupt name): no two runs,
  agents, parallel calls or middlewares share one, and a resumed pass derives the same id.
- A decision is bound to the arguments it was given for (``argument_digest`` of tool name and
  input). It stays readable for its call during one interrupt cycle and is retired once its
  call starts or gets a result (every call of the batch gets one before the next model call),
  so it never becomes a standing approval and a call is never run twice on one decision.
- A call that starts executing under a decision, or a call to a tool that is not idempotent, is
  recorded as started (``InterruptBook.started``) and saved before it runs; a resumed run never
  runs a started call without a result again unless someone decides so.

Everything here lives in ``State.interrupts`` and is saved with the rest of ``runs.state_json``,
in the same save as the history.
"""
