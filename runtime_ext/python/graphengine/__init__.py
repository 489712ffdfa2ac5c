"""GraphEngine: a graph compiler and inference service modeled on Huawei's Graph Engine.

`graphengine.Session` is the in-process API (GE's API is in-process first); the gRPC
server and `graphengine.clients.Client` speak the same methods over the wire.
"""

__version__ = "0.1.0"

__all__ = ["Session", "SessionOptions", "Client", "__version__"]


def __getattr__(name: str):
    # Lazy: importing graphengine must not pull in the compiler, the runtime or gRPC.
    if name in ("Session", "SessionOptions"):
        from graphengine.server.core import session

        return getattr(session, name)
    if name == "Client":
        from graphengine.clients.client import Client

        return Client
    raise AttributeError(f"module 'graphengine' has no attribute {name!r}")
