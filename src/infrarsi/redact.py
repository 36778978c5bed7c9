"""No secret in any artefact or line: a URL's password (the bank's, a run store's, an LLM
endpoint's) is shown and written as ``***`` wherever the tool shows or writes the URL; the
real URL stays in the process that connects with it. A masked URL read back (a run's
``run.json``) is matched to the real one this process knows, or to one given again in the
environment (``INFRARSI_STORE_URL``)."""

from __future__ import annotations

import os
import re

MASK = "***"
_PASSWORD = re.compile(r"^([A-Za-z][\w+.-]*://[^/@:?#]*:)([^@/?#]+)(@)")
_QUERY = re.compile(r"([?&](?:password|passwd|pwd|api_key|apikey|token|secret)=)([^&#]+)", re.I)
_known: dict[str, str] = {}  # masked -> real, for the URLs this process was given
STORE_URL_ENV = "INFRARSI_STORE_URL"


def masked_url(url: str) -> str:
    """``url`` with its password (and any password-like query value) as ``***``; the real
    URL remembered for ``unmasked``."""
    shown = _mask(url)
    if shown != url:
        _known[shown] = url
    return shown


def _mask(url: str) -> str:
    return _QUERY.sub(rf"\g<1>{MASK}", _PASSWORD.sub(rf"\g<1>{MASK}\g<3>", url))


def is_masked(url: str) -> bool:
    """Whether ``url`` had a secret taken out."""
    return MASK in url and _mask(url.replace(MASK, "x")) != url.replace(MASK, "x")


def unmasked(url: str) -> str | None:
    """The real URL behind a masked one: this process's, else ``INFRARSI_STORE_URL``'s where
    its masked form is ``url``; None when neither is known. A URL with nothing masked is
    itself."""
    if MASK not in url:
        return url
    if url in _known:
        return _known[url]
    given = os.environ.get(STORE_URL_ENV, "")
    return given if given and _mask(given) == url else None


def scrub(text: str, *urls: str) -> str:
    """``text`` with every known secret of ``urls`` (and every URL password in it) masked."""
    for url in urls:
        shown = masked_url(url)
        if shown != url:
            text = text.replace(url, shown)
    return re.sub(r"([A-Za-z][\w+.-]*://[^/@:\s'\"]*:)([^@/\s'\"]+)(@)", rf"\g<1>{MASK}\g<3>", text)
