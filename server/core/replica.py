"""This server's replica identity: the id its session ids start with, and where it is reached.

`address_format` is one pattern for every replica's address, "{replica}" standing for the
replica id: a StatefulSet's pods are reached at
"{replica}.<headless service>.<namespace>.svc:50051", so one setting gives this server's own
address and the address of the replica that owns any session id it is asked about.
"""

from __future__ import annotations

import dataclasses

from graphengine.api.session_ids import check_replica_id, new_session_id, owner_of
from graphengine.engine.errors import SessionElsewhere

__all__ = ["Replica", "check_address_format", "check_replica_id"]

MAX_ADDRESS_FORMAT = 256


def check_address_format(fmt: str) -> str:
    """`fmt`, or ValueError: empty, or one "{replica}" and no other braces, at most 256
    characters."""
    if not fmt:
        return fmt
    if len(fmt) > MAX_ADDRESS_FORMAT:
        raise ValueError(f"the replica address format is {len(fmt)} characters, over "
                         f"{MAX_ADDRESS_FORMAT}")
    rest = fmt.replace("{replica}", "", 1)
    if rest == fmt or "{" in rest or "}" in rest or any(c.isspace() for c in fmt):
        raise ValueError(f"the replica address format {fmt!r:.80} must hold '{{replica}}' "
                         f"once, no other braces and no spaces, e.g. "
                         f"'{{replica}}.graphengine-sessions.default.svc:50051'")
    return fmt


@dataclasses.dataclass(frozen=True)
class Replica:
    replica_id: str
    address_format: str = ""

    def __post_init__(self) -> None:
        check_replica_id(self.replica_id)
        check_address_format(self.address_format)

    @property
    def address(self) -> str:
        """Where clients reach this replica ("" when no format is configured)."""
        return self.address_of(self.replica_id)

    def address_of(self, replica_id: str) -> str:
        return self.address_format.replace("{replica}", replica_id) if self.address_format else ""

    def new_session_id(self) -> str:
        return new_session_id(self.replica_id)

    def elsewhere(self, session_id: str) -> SessionElsewhere | None:
        """The NOT_FOUND for a session id that names another replica; None if it names this
        one or none."""
        owner = owner_of(session_id)
        if owner is None or owner == self.replica_id:
            return None
        address = self.address_of(owner)
        where = f" at {address}" if address else ""
        return SessionElsewhere(
            f"session '{session_id[:120]}' is held by replica '{owner}'{where}, not by this "
            f"replica '{self.replica_id}': send its calls there (graphengine's Client does, "
            f"given every replica's address or a name that resolves to them)",
            replica=owner, address=address or None)
