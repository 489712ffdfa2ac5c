"""GraphEngine clients: the Python SDK (`Client`) and the `graphengine` CLI."""

from .client import Client, RemoteSession, StreamResult
from .errors import ClientError

__all__ = ["Client", "ClientError", "RemoteSession", "StreamResult"]
