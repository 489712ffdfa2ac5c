"""The variable methods of RemoteSession (client.py): a session's variables and their
checkpoints over the wire, with the in-process Session's names and signatures.

A checkpoint is a file on the caller's side: `save_checkpoint(path)` streams its bytes
from the server into `path` (or a binary file object), `restore_checkpoint(path)` streams
them back. The server never reads or writes a path a client names.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc
import numpy as np

from graphengine.api import convert
from graphengine.v1 import session_pb2

from .errors import from_rpc_error

CHUNK_BYTES = 1 << 18  # bytes of a checkpoint per message sent (below any usual bound)

__all__ = ["RemoteVariables"]


class RemoteVariables:
    def list_variables(self) -> list[Any]:
        """The session's variables as `graphengine.api.types.TensorInfo`, by name."""
        response = self._call("ListVariables",
                              session_pb2.ListVariablesRequest(session_id=self.id))
        return [convert.tensor_info_from_pb(t) for t in response.variables]

    def get_variables(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Copies of the variables (every one, or those named), as one consistent state."""
        if names is not None and not list(names):
            return {}  # none asked for (on the wire, no names means every one)
        request = session_pb2.GetVariablesRequest(session_id=self.id, names=list(names or ()))
        response = self._call("GetVariables", request)
        return {k: a.copy() for k, a in convert.tensors_from_pb(response.variables).items()}

    def set_variables(self, values: Mapping[str, Any]) -> None:
        """Writes the variables, all or none (see graphengine.Session.set_variables)."""
        arrays = {k: np.asarray(v) for k, v in values.items()}
        self._call("SetVariables", session_pb2.SetVariablesRequest(
            session_id=self.id, variables=convert.tensors_to_pb(arrays)))

    def save_checkpoint(self, path: str | os.PathLike | Any,
                        names: Sequence[str] | None = None) -> int:
        """Streams a checkpoint of the variables (every one, or those named) from the server
        into the local file `path` (or a binary file object); returns the bytes written."""
        request = session_pb2.SaveCheckpointRequest(session_id=self.id, names=list(names or ()))
        chunks = self._stub.SaveCheckpoint(request, timeout=self._client.timeout,
                                           metadata=self._client._metadata)
        if hasattr(path, "write"):
            return _drain(chunks, path)
        tmp = f"{os.fspath(path)}.partial"
        try:
            with open(tmp, "wb") as f:
                total = _drain(chunks, f)
            os.replace(tmp, path)  # a failed transfer leaves no truncated checkpoint
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return total

    def restore_checkpoint(self, source: str | os.PathLike | bytes | Any) -> list[str]:
        """Streams a checkpoint (a local path, its bytes, or a binary file object) to the
        server, which sets every variable it holds, or none; returns their names."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = memoryview(source)
            pieces: Iterator[bytes] = (bytes(data[i:i + CHUNK_BYTES])
                                       for i in range(0, max(len(data), 1), CHUNK_BYTES))
            return self._restore(pieces)
        if hasattr(source, "read"):
            return self._restore(iter(lambda: source.read(CHUNK_BYTES), b""))
        with open(source, "rb") as f:
            return self._restore(iter(lambda: f.read(CHUNK_BYTES), b""))

    def _restore(self, pieces: Iterator[bytes]) -> list[str]:
        def requests() -> Iterator[session_pb2.RestoreCheckpointRequest]:
            first = True
            for piece in pieces:
                yield session_pb2.RestoreCheckpointRequest(
                    session_id=self.id if first else "", data=piece)
                first = False
            if first:  # an empty file: still one message, so the server says what is wrong
                yield session_pb2.RestoreCheckpointRequest(session_id=self.id)

        # the stub of the replica holding the session (a stream is sent once: not rerouted)
        return list(self._client._call(self._stub.RestoreCheckpoint, requests()).names)


def _drain(chunks: Any, f: Any) -> int:
    total = 0
    try:
        for chunk in chunks:
            f.write(chunk.data)
            total += len(chunk.data)
    except grpc.RpcError as err:
        raise from_rpc_error(err) from None
    return total
