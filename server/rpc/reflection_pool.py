"""The descriptor pool that server reflection answers from.

Our stubs live in graphengine's own pool (`graphengine._pool`, see
runtime_ext/tools/proto_stubs.py), the health and reflection services' in protobuf's default
pool; reflection reads one pool. This one holds copies of the files that define the services
the server offers, each with the files it imports, so that `file_containing_symbol` answers
for every service that `list_services` names.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor


def merged_pool(files: Iterable[FileDescriptor]) -> descriptor_pool.DescriptorPool:
    """A new pool with `files` and, before each, the files it imports."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(fd: FileDescriptor) -> None:
        if fd.name in added:
            return
        for dep in fd.dependencies:
            add(dep)
        pool.AddSerializedFile(fd.serialized_pb)
        added.add(fd.name)

    for fd in files:
        add(fd)
    return pool


def reflection_pool() -> descriptor_pool.DescriptorPool:
    from grpc_health.v1 import health_pb2
    from grpc_reflection.v1alpha import reflection_pb2

    from graphengine.kserve.v2 import grpc_service_pb2
    from graphengine.v1 import session_pb2

    return merged_pool((session_pb2.DESCRIPTOR, grpc_service_pb2.DESCRIPTOR,
                        health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR))
