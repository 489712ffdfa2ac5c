"""GraphEngine: a graph compiler and inference service modeled on Huawei's Graph Engine.

`graphengine.Session` is the in-process API (GE's API is in-process first); the gRPC
server and `graphengine.clients.Client` speak the same methods over the wire.
`graphengine.Graph` and `graphengine.ops` build graphs op by op (GE's graph construction
API); `graphengine.register_op` adds a custom operator, `load_plugin` a file of them (a
Python module, or a native kernel library built against `get_include()`'s header).
"""

__version__ = "0.1.0"

__all__ = ["Client", "Graph", "Session", "SessionOptions", "Tensor", "__version__",
           "get_include", "load_plugin", "register_op"]


def get_include() -> str:
    """The folder holding `graphengine/plugin.h`, the C ABI of native kernel plugins:
    `cc -shared -fPIC -I"$(python -c 'import graphengine; print(graphengine.get_include())')"`."""
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def __getattr__(name: str):
    # Lazy: importing graphengine must not pull in the compiler, the runtime or gRPC.
    if name in ("Session", "SessionOptions"):
        from graphengine.server.core import session

        return getattr(session, name)
    if name in ("Graph", "Tensor"):
        from graphengine.engine import builder

        return getattr(builder, name)
    if name in ("register_op", "load_plugin"):
        from graphengine.engine.ops import custom

        return getattr(custom, name)
    if name == "ops":
        import importlib

        return importlib.import_module("graphengine.ops")
    if name == "Client":
        from graphengine.clients.client import Client

        return Client
    raise AttributeError(f"module 'graphengine' has no attribute {name!r}")
