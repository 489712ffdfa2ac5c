"""The variable half of a Session: its variables by name, and checkpoints of them.

`StatefulSession` is a part of `Session` (server/core/session.py), kept apart as
`Admission` is; it reads the session's `_variables` (a VariableStore), `_touch`,
`_running`, `_check_open`, `options`, `_device_memory` and `id`. GE's GetVariables and
checkpoint callbacks: in process, a checkpoint is a file the caller names (a path or a
binary file object); over the wire its bytes travel to and from the client (the server
never opens a path a request names).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from graphengine.api.types import TensorInfo
from graphengine.engine.errors import InvalidInput

from . import checkpoint

__all__ = ["StatefulSession"]


class StatefulSession:
    def list_variables(self) -> list[TensorInfo]:
        """The session's variables: name, dtype and shape, by name."""
        self._check_open()
        return self._variables.info()

    def get_variables(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Copies of the variables (every one, or those named), read as one consistent
        state: no run that writes one of them is half done."""
        self._check_open()
        with self._running():
            return self._variables.get(None if names is None else list(names))

    def set_variables(self, values: Mapping[str, Any]) -> None:
        """Writes the variables, all or none, while no run uses them. A new name creates a
        variable (its bytes admitted against the session's quota); one a graph uses keeps
        its dtype and shape; an unused one of another dtype or shape is replaced."""
        self._check_open()
        with self._running():
            self._variables.set(values)

    def save_checkpoint(self, path: str | os.PathLike | Any,
                        names: Sequence[str] | None = None) -> int:
        """Writes the variables (every one, or those named), as one consistent state, to a
        checkpoint file (server/core/checkpoint.py) at `path` or into a binary file
        object; returns the bytes written."""
        self._check_open()
        with self._running():
            if hasattr(path, "write"):
                return self._variables.save(path, names)
            with open(path, "wb") as f:
                return self._variables.save(f, names)

    def checkpoint_chunks(self, names: Sequence[str] | None = None) -> Iterator[bytes]:
        """The checkpoint's bytes in pieces (what SaveCheckpoint streams)."""
        self._check_open()
        self._touch()
        return self._variables.checkpoint_chunks(None if names is None else list(names))

    def restore_checkpoint(self, source: str | os.PathLike | bytes | Any) -> list[str]:
        """Sets every variable a checkpoint holds (a path, its bytes, or a seekable binary
        file object), all or none, after checking the whole file; returns their names. A
        damaged or foreign file is refused (InvalidInput naming what is wrong) and nothing
        changes."""
        self._check_open()
        with self._running():
            if isinstance(source, (bytes, bytearray, memoryview)):
                data = memoryview(source)
                return self._variables.restore(io.BytesIO(data), data.nbytes,
                                               f"({data.nbytes} bytes)")
            if hasattr(source, "read"):
                if not (hasattr(source, "seekable") and source.seekable()):
                    raise InvalidInput("restore_checkpoint needs a path, bytes or a seekable "
                                       "binary file")
                start = source.tell()
                size = source.seek(0, os.SEEK_END) - start
                source.seek(start)
                return self._variables.restore(source, size, "(file object)")
            try:
                f = open(source, "rb")
            except OSError as exc:
                raise InvalidInput(f"cannot open checkpoint {os.fspath(source)!r}: "
                                   f"{exc.strerror}") from None
            with f:
                return self._variables.restore(f, os.fstat(f.fileno()).st_size,
                                               repr(os.fspath(source)))

    def checkpoint_limit(self) -> int:
        """The most checkpoint bytes the session may be sent: what its quota (or device)
        holds, plus the header."""
        quota = self.options.memory_limit_bytes or self._device_memory() or 1 << 40
        return quota + checkpoint.MAX_HEADER_BYTES + checkpoint.ALIGN * checkpoint.MAX_VARIABLES
