"""The variable methods of the graphengine.v1.GraphEngine servicer: ListVariables,
GetVariables, SetVariables, SaveCheckpoint (streamed out) and RestoreCheckpoint (streamed
in). A part of GraphEngineServicer (servicer.py), kept apart as its own job; it reads the
servicer's `_session`, `_max_elements` and `_max_message_bytes`.

A checkpoint travels as bytes in pieces (CHUNK_BYTES, or less under a smaller message
bound), so its size is bounded by the session's quota, not by a message: the server opens no
path a request names.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from graphengine.api import convert
from graphengine.engine.errors import InvalidInput, ResourceExhausted
from graphengine.v1 import session_pb2 as se

from ..logs import log_event

CHUNK_BYTES = 1 << 20  # bytes of a checkpoint per streamed message (at most)

_log = logging.getLogger("graphengine.server.rpc.variables")

__all__ = ["VariableMethods", "CHUNK_BYTES"]


def _names(names: Iterable[str]) -> list[str] | None:
    wanted = list(names)
    if len(set(wanted)) != len(wanted):
        raise InvalidInput(f"names has duplicates: {wanted[:16]}")
    return wanted or None


class VariableMethods:
    def ListVariables(self, request: se.ListVariablesRequest, context: Any
                      ) -> se.ListVariablesResponse:
        infos = self._session(request.session_id).list_variables()
        return se.ListVariablesResponse(variables=[convert.tensor_info_to_pb(t) for t in infos])

    def GetVariables(self, request: se.GetVariablesRequest, context: Any
                     ) -> se.GetVariablesResponse:
        session = self._session(request.session_id)
        wanted = _names(request.names)
        # each tensor's bytes, plus its name and shape and the fields' tags (generously)
        sizes = {t.name: int(t.dtype.itemsize * _numel(t.shape)) + len(t.name.encode())
                 + 11 * len(t.shape or ()) + 32 for t in session.list_variables()}
        total = sum(sizes.get(n, 0) for n in (wanted or sizes))
        if total > self._max_message_bytes:
            raise ResourceExhausted(
                f"the variables asked for take {total} bytes, more than one message carries "
                f"({self._max_message_bytes}); ask for fewer names, or save a checkpoint "
                f"(it streams)")
        values = session.get_variables(wanted)
        return se.GetVariablesResponse(variables=convert.tensors_to_pb(values))

    def SetVariables(self, request: se.SetVariablesRequest, context: Any
                     ) -> se.SetVariablesResponse:
        session = self._session(request.session_id)
        values = convert.tensors_from_pb(request.variables, self._max_elements)
        session.set_variables(values)
        log_event(_log, logging.INFO, "variables_set", session=session.id, count=len(values))
        return se.SetVariablesResponse()

    def SaveCheckpoint(self, request: se.SaveCheckpointRequest, context: Any
                       ) -> Iterator[se.CheckpointChunk]:
        session = self._session(request.session_id)
        chunk = min(CHUNK_BYTES, self._max_message_bytes - 16)  # a message's own bytes: < 16
        buf = bytearray()
        sent = 0
        for piece in session.checkpoint_chunks(_names(request.names)):
            buf += piece
            while len(buf) >= chunk:
                yield se.CheckpointChunk(data=bytes(buf[:chunk]))
                del buf[:chunk]
                sent += chunk
        if buf:
            yield se.CheckpointChunk(data=bytes(buf))
            sent += len(buf)
        log_event(_log, logging.INFO, "checkpoint_saved", session=session.id, bytes=sent)

    def RestoreCheckpoint(self, request_iterator: Iterable[se.RestoreCheckpointRequest],
                          context: Any) -> se.RestoreCheckpointResponse:
        session = None
        data = bytearray()
        for request in request_iterator:
            if session is None:
                session = self._session(request.session_id)
                limit = session.checkpoint_limit()
            elif request.session_id and request.session_id != session.id:
                raise InvalidInput(f"RestoreCheckpoint: a message names session "
                                   f"'{request.session_id}', the stream began with "
                                   f"'{session.id}'")
            if len(data) + len(request.data) > limit:
                raise ResourceExhausted(
                    f"the checkpoint sent is over {limit} bytes, more than session "
                    f"'{session.id}' may hold")
            data += request.data
        if session is None:
            raise InvalidInput("RestoreCheckpoint: the stream carried no message")
        names = session.restore_checkpoint(bytes(data))
        log_event(_log, logging.INFO, "checkpoint_restored", session=session.id,
                  bytes=len(data), variables=len(names))
        return se.RestoreCheckpointResponse(names=names)


def _numel(shape: Any) -> int:
    n = 1
    for d in shape or ():
        n *= int(d)
    return n
