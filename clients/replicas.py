"""One Client over several server replicas: each session's calls go to the replica holding it.

A session lives in one server's memory, and its id names that server's replica
(graphengine.api.session_ids: "<replica_id>.<random>"). Given several addresses, or a DNS
name with several A records (a Kubernetes headless Service's pods), the Client keeps one
channel per address and:

- creates sessions round-robin over the replicas, moving on to the next one when a replica
  is down, draining (UNAVAILABLE) or full (RESOURCE_EXHAUSTED);
- learns which replica each address is from the ids of the sessions it creates there, and
  for other ids (`Client.attach`) asks every address it does not know yet (GetServerInfo);
- when a replica answers NOT_FOUND naming the session's owner (SessionElsewhere), looks the
  owner up (again, re-resolving the DNS name: a rescheduled pod has a new address), dials
  the owner's advertised address if no known address is that replica, and sends the call
  there once.

With one address nothing of this runs: the Client is the single-channel client it always was.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from graphengine.api.session_ids import owner_of
from graphengine.errors import GraphEngineError, NotFound
from graphengine.v1 import session_pb2, session_pb2_grpc

Resolver = Callable[..., list]
# Names gRPC resolves itself: a scheme ("unix:/path", "dns:///name:port", "ipv4:..."), and
# localhost, which resolves to this machine however many records it has.
_SCHEMES = ("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:", "vsock:")


def split_host_port(address: str) -> tuple[str, str] | None:
    """("host", "port") of "host:port" or "[v6]:port"; None for anything else."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return None
    return host, port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def expand(address: str, resolve: Resolver = socket.getaddrinfo) -> list[str]:
    """The addresses a Client dials for `address`: one "ip:port" per distinct A record of a
    name that has several, else `address` itself (gRPC resolves it as it always did)."""
    parts = split_host_port(address)
    if parts is None or address.startswith(_SCHEMES):
        return [address]
    host, port = parts
    if _is_ip(host) or host == "localhost":
        return [address]
    try:
        records = resolve(host, int(port), socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return [address]  # not resolvable now: gRPC reports it at the first call, as before
    ips = sorted({r[4][0] for r in records})
    return [f"{ip}:{port}" for ip in ips] if len(ips) > 1 else [address]


@dataclasses.dataclass
class Endpoint:
    """One address of the Client: its channel, and which replica answers there."""

    target: str
    channel: grpc.Channel
    stub: session_pb2_grpc.GraphEngineStub
    replica_id: str | None = None
    advertised: str = ""

    def __repr__(self) -> str:
        return f"Endpoint({self.target!r}, replica={self.replica_id!r})"


class Replicas:
    """The Client's endpoints. `call(method, request)` is the Client's RPC wrapper (deadline,
    token, status -> graphengine.errors); `make_channel(target)` dials one address."""

    def __init__(self, addresses: list[str], make_channel: Callable[[str], grpc.Channel],
                 call: Callable[[Any, Any], Any], dns_name: str | None = None,
                 routed: bool = False, resolve: Resolver = socket.getaddrinfo) -> None:
        self._make_channel = make_channel
        self._routed = routed or dns_name is not None or len(addresses) > 1
        self._call = call
        self._dns_name = dns_name  # re-resolved when a replica is not found
        self._resolve = resolve
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self.endpoints: list[Endpoint] = []
        for address in addresses:
            self._add(address)

    @property
    def several(self) -> bool:
        """Route by session id: given a list of addresses or a name of several records (a
        single address is a plain single-channel client)."""
        return self._routed

    def _add(self, target: str) -> Endpoint:
        channel = self._make_channel(target)
        endpoint = Endpoint(target, channel, session_pb2_grpc.GraphEngineStub(channel))
        with self._lock:
            self.endpoints.append(endpoint)
        return endpoint

    def close(self) -> None:
        with self._lock:
            endpoints = list(self.endpoints)
        for endpoint in endpoints:
            endpoint.channel.close()

    # ---- which endpoint --------------------------------------------------------------
    def creation_order(self) -> list[Endpoint]:
        """Every replica once, starting with the next one's turn (round-robin); addresses
        that turned out to be a replica already listed are left out."""
        with self._lock:
            endpoints = list(self.endpoints)
        start = next(self._turn) % len(endpoints)
        order, seen = [], set()
        for endpoint in endpoints[start:] + endpoints[:start]:
            if endpoint.replica_id is None or endpoint.replica_id not in seen:
                order.append(endpoint)
                seen.add(endpoint.replica_id)
        return order

    def learn(self, endpoint: Endpoint, session_id: str) -> None:
        """The replica an id made or listed at `endpoint` names is the one answering there."""
        owner = owner_of(session_id)
        if owner is not None and endpoint.replica_id is None:
            endpoint.replica_id = owner

    def find(self, replica_id: str) -> Endpoint | None:
        with self._lock:
            return next((e for e in self.endpoints if e.replica_id == replica_id), None)

    def for_session(self, session_id: str) -> Endpoint:
        """The endpoint of the replica `session_id` names; the first one when it names none
        or none is known to be it (that replica then says where the session is)."""
        owner = owner_of(session_id) if self.several else None
        if owner is None:
            return self.endpoints[0]
        found = self.find(owner)
        if found is None:
            self.discover()
            found = self.find(owner)
        return found or self.endpoints[0]

    def discover(self) -> None:
        """Ask each endpoint whose replica is unknown which replica it is; re-resolve the DNS
        name first, adding an endpoint per new record (pods scaled up or rescheduled)."""
        if self._dns_name is not None:
            known = {e.target for e in self.endpoints}
            for target in expand(self._dns_name, self._resolve):
                if target not in known and target != self._dns_name:
                    self._add(target)
        for endpoint in [e for e in self.endpoints if e.replica_id is None]:
            try:
                info = self._call(endpoint.stub.GetServerInfo,
                                  session_pb2.GetServerInfoRequest())
            except GraphEngineError:
                continue  # down or an older server: it stays unknown
            endpoint.replica_id = info.replica_id or None
            endpoint.advertised = info.address

    def reroute(self, session_id: str, endpoint: Endpoint, error: NotFound) -> Endpoint | None:
        """Where to send a call again after `endpoint` answered NOT_FOUND: the owner that
        NOT_FOUND names, if that is another replica; None to give up (the session is gone)."""
        owner = getattr(error, "replica", None)
        if not self.several or not owner or owner == endpoint.replica_id:
            return None
        if owner_of(session_id) != owner:
            return None
        found = self.find(owner)
        if found is None:
            self.discover()
            found = self.find(owner)
        address = getattr(error, "address", None)
        if found is None and address:
            found = self._add(address)
            found.replica_id = owner
        return found if found is not endpoint else None

    def each(self) -> Iterator[Endpoint]:
        with self._lock:
            endpoints = list(self.endpoints)
        yield from endpoints
