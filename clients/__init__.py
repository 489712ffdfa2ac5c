"""GraphEngine's Python client SDK: `Client` (a server, or replicas of one) and its sessions."""

from .client import Client, RemoteSession, StreamResult
from .errors import ClientError

__all__ = ["Client", "ClientError", "RemoteSession", "StreamResult"]
