"""Session ids that name their replica: "<replica_id>.<32 hex digits>".

A session lives in one server process's memory, so replicas behind one name cannot share
sessions. Instead each id says which replica holds it: the server that creates a session
puts its replica id in front (graphengine.server.core.replica), a server asked about another
replica's session answers NOT_FOUND naming the owner, and a client of several replicas
sends each session's calls to the replica its id names (graphengine.clients.replicas).
Both sides read the format here. An id without a replica (a server that has none, an
in-process Session) has no owner, and a client sends it to its first address.
"""

from __future__ import annotations

import re
import socket
import uuid

# A DNS label without dots (a StatefulSet pod name is one), so the id splits at its last dot.
REPLICA_ID = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$")
MAX_REPLICA_ID = 63


def check_replica_id(replica_id: str) -> str:
    """`replica_id`, or ValueError saying what a replica id may be."""
    if not isinstance(replica_id, str) or not REPLICA_ID.match(replica_id):
        shown = repr(replica_id)[:80]
        raise ValueError(f"replica id {shown} must be 1-{MAX_REPLICA_ID} letters, digits, "
                         f"'-' or '_', starting and ending with a letter or digit")
    return replica_id


def default_replica_id(hostname: str | None = None) -> str:
    """The host name's first label (in Kubernetes, the pod's name), made a valid id."""
    name = (hostname if hostname is not None else socket.gethostname()).split(".")[0]
    name = re.sub(r"[^A-Za-z0-9_-]", "-", name)[:MAX_REPLICA_ID].strip("-_")
    return name or "replica"


def new_session_id(replica_id: str) -> str:
    return f"{replica_id}.{uuid.uuid4().hex}"


def owner_of(session_id: str) -> str | None:
    """The replica a session id names, or None for an id without one."""
    head, dot, _ = session_id.rpartition(".")
    return head if dot and REPLICA_ID.match(head) else None
