"""Keeping secrets out of what hango saves and shows: error texts and database URLs.

An error message quotes what failed, and what failed is often a credential: a tool that
called an API with a bad key, a database URL with its password. ``redact_secrets`` replaces
the value of every environment variable whose name says it holds a secret; ``redact_url``
hides the password of a URL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit, urlunsplit

#: Names of environment variables whose values are secrets: ``*_API_KEY``, ``*_TOKEN``,
#: ``*PASSWORD*``, ``*SECRET*`` (case-insensitive; ``API_KEY`` and ``TOKEN`` alone too).
SECRET_NAME: Final = re.compile(r"(^|_)API_KEY$|(^|_)TOKEN$|PASSWORD|SECRET", re.IGNORECASE)

#: Values shorter than this are not redacted: they would match ordinary text everywhere and
#: protect nothing a guess could not find.
MIN_SECRET_LENGTH: Final = 4


def secret_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Value -> variable name, for every variable of ``env`` (default: the process
    environment) whose name matches ``SECRET_NAME`` and whose value has at least
    ``MIN_SECRET_LENGTH`` characters."""
    env = os.environ if env is None else env
    return {
        value: name
        for name, value in env.items()
        if len(value) >= MIN_SECRET_LENGTH and SECRET_NAME.search(name)
    }


def redact_secrets(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with each secret value of ``env`` replaced by ``[redacted NAME]``.

    Longer values are replaced first, so a secret that contains another is hidden whole.
    """
    secrets = secret_values(env)
    for value in sorted(secrets, key=len, reverse=True):
        if value in text:
            text = text.replace(value, f"[redacted {secrets[value]}]")
    return text


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: what an error may show.

    ``postgresql://app:s3cret@db/prod`` -> ``postgresql://app:***@db/prod``. A string that
    does not parse as a URL is returned as it is.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{name}:***@{host}"))
