"""The errors of models and providers, in one module every provider module imports.

``ModelError``: a model call failed for good. ``ModelSpecError``: a model spec cannot be turned
into a model (unknown provider, missing extra or key). ``ScriptError``: a scripted model's
script is malformed. Here rather than beside their raisers so that ``select`` (which builds the
providers) and the providers (which raise ``ModelSpecError``) need not import each other.
"""

from __future__ import annotations


class ModelError(Exception):
    """A model call failed for good (after any retries); the message is the provider's own.

    ``status`` is the HTTP status of the failed attempt (None when no answer arrived or the
    failure was not an HTTP one). ``transient`` is True when another attempt could have
    succeeded (429, 529 or another 5xx, a connection failure) and nothing of the call had
    reached the caller yet: the provider's retries are used up, and a fallback may send the
    same call to another model. A rejected request (400, a context overflow, 401, ...) and a
    stream broken after content was delivered are not transient.
    """

    def __init__(self, message: str, *, status: int | None = None, transient: bool = False):
        super().__init__(message)
        self.status = status
        self.transient = transient


class ModelSpecError(ValueError):
    """A model spec names no known provider, or its provider cannot be set up (missing extra
    or API key); the message is one line saying what to set or install."""


class ScriptError(ValueError):
    """A script file is malformed; the message names the file and the turn index."""
