"""``ModelFallbackMiddleware`` (slot ``model_fallback``): a call the provider could not serve
is repeated on the next model of a list.

A ModelWrapper. It switches only on a ``ModelError`` marked ``transient`` (the provider's own
retries are used up on an overload, a 5xx, a rate limit or a connection failure, and nothing
of the call reached the caller) or carrying status 429 (a spend limit or an exhausted quota,
which the provider does not retry but another provider can serve). A rejected request (a 400,
a context overflow: another model would be sent the same history) and a stream broken after
content was delivered end the call as they are; a pause or a cancellation is not an
``Exception`` and passes through untouched.

Each switch is one call with ``attrs.evolve(req, model=other)``: the next model call of the run
starts from the run's model again, and nothing about the switch is saved with the run. The
slot sits outside ``prompt_cache``, so provider-specific request parts (``cache_control``) are
decided for the model actually called.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from opentelemetry.util.types import AttributeValue

from hango import Model, ModelError, ModelResponse
from hango.middleware import (
    PROVIDER_NAME,
    REQUEST_MODEL,
    RETRIED,
    ModelHandler,
    ModelRequest,
    provider_name,
    record,
)

#: ``http.response.status_code`` of the failure that caused a switch, when it had one.
STATUS_CODE = "http.response.status_code"


def switches(error: ModelError) -> bool:
    """Whether another model may be asked: the provider could not serve the call, through no
    fault of the request."""
    return error.transient or error.status == 429


def model_name(model: Model) -> str:
    """The name the model sends (``claude-sonnet-4-5``), else its class name."""
    return getattr(model, "name", None) or type(model).__name__


class ModelFallbackMiddleware:
    """Repeats a call its model could not serve on each of ``models`` in turn.

    ``models`` are ``(spec, model)`` pairs, built once when the stack is built (one set of
    provider clients per middleware, not per call). With none it passes every call through.
    """

    name = "model_fallback"

    def __init__(self, models: Sequence[tuple[str, Model]] = ()) -> None:
        self.models = tuple(models)

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        try:
            return await next(req)
        except ModelError as exc:
            if not switches(exc) or not self.models:
                raise
            called = "the run's model" if req.model is None else model_name(req.model)
            failures = [(called, exc)]
        for spec, model in self.models:
            self._record_switch(model, failures[-1][1])
            try:
                return await next(attrs.evolve(req, model=model))
            except ModelError as exc:
                if not switches(exc):
                    raise
                failures.append((spec, exc))
        last = failures[-1][1]
        tried = "; ".join(f"{who}: {why}" for who, why in failures)
        raise ModelError(
            f"every model failed: {tried}", status=last.status, transient=last.transient
        ) from last

    def _record_switch(self, model: Model, cause: ModelError) -> None:
        attributes: dict[str, AttributeValue] = {
            REQUEST_MODEL: model_name(model),
            PROVIDER_NAME: provider_name(model),
        }
        if cause.status is not None:
            attributes[STATUS_CODE] = cause.status
        record(
            RETRIED,
            middleware=self.name,
            reason="provider failed, next model",
            attributes=attributes,
        )
