"""Bearer-token authentication: who is calling.

A client sends `authorization: Bearer <token>` metadata; the token's configured name is
the caller's identity. Sessions belong to the identity that created them, and the session
core answers NOT_FOUND to every other identity (a session id is not a capability).
Without configured tokens authentication is off and every caller is the anonymous
identity None.
"""

from __future__ import annotations

import contextvars
import hmac
from collections.abc import Iterable, Mapping

from graphengine.engine.errors import Unauthenticated

METADATA_KEY = "authorization"
SCHEME = "bearer"


class TokenAuth:
    """The configured tokens; `identify` maps a call's metadata to its identity."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._tokens = [(name, token.encode()) for name, token in tokens.items()]

    def identify(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
        """The identity of the token in `metadata`; raises Unauthenticated otherwise."""
        values = [v for k, v in metadata or () if k == METADATA_KEY]
        if not values:
            raise Unauthenticated("missing 'authorization: Bearer <token>' metadata")
        if len(values) > 1:
            raise Unauthenticated("more than one 'authorization' metadata entry")
        value = values[0].decode("latin-1") if isinstance(values[0], bytes) else values[0]
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != SCHEME or not token.strip():
            raise Unauthenticated("the 'authorization' metadata must be 'Bearer <token>'")
        given = token.strip().encode()
        found = None
        # Compare with every token, in constant time, so timing tells nothing about them.
        for name, known in self._tokens:
            if hmac.compare_digest(given, known):
                found = name
        if found is None:
            raise Unauthenticated("the bearer token is not valid")
        return found


_identity: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "graphengine_identity", default=None)


def current_identity() -> str | None:
    """The identity of the RPC being handled on this thread (None: anonymous)."""
    return _identity.get()


def bind_identity(identity: str | None) -> contextvars.Token:
    return _identity.set(identity)


def unbind_identity(token: contextvars.Token) -> None:
    try:
        _identity.reset(token)
    except ValueError:  # a generator finished on another context: nothing to restore
        _identity.set(None)
