"""A session's variables: named tensors in its device's memory, shared by its graphs.

Each variable is one `_runtime.Variable` (its bytes allocated once on the device, never
moved: every model loaded with it binds them and runs read and write them in place) and a
reader/writer lock. A run takes the locks of the variables its graph touches — shared for
those it only reads, exclusive for those it writes — in name order (so two runs never wait
for each other in a circle) and holds them for the whole run; `get` takes them shared,
`set` and a restore exclusive. So runs that write a variable are serialized and a reader
never sees half a write. A variable's bytes count against the session's memory quota
(Session.device_bytes).

dtype and shape are fixed while a graph of the session uses the variable (its models bound
those bytes); `set` with another dtype or shape replaces an unused variable.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import BinaryIO

import numpy as np

from graphengine import _runtime
from graphengine.api.types import RunControl, TensorInfo
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput, NotFound
from graphengine.engine.model import VariableSig
from graphengine.engine.ops.variables import VARIABLE_DTYPES

from . import checkpoint

POLL_SECONDS = 0.05  # how often a run waiting for a variable looks at its cancel and deadline

# (bytes, what for) -> a context manager holding them against the quota, or ResourceExhausted
Reserve = Callable[[int, str], contextlib.AbstractContextManager]

__all__ = ["VariableStore"]


class _RWLock:
    """Many readers or one writer; a waiting writer keeps new readers out (no starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire(self, write: bool, timeout: float | None) -> bool:
        with self._cond:
            if write:
                self._writers_waiting += 1
                ok = False
                try:
                    ok = self._cond.wait_for(lambda: not self._writer and not self._readers,
                                             timeout)
                    if ok:
                        self._writer = True
                    return ok
                finally:
                    self._writers_waiting -= 1
                    if not ok:  # readers held off by this writer may go now
                        self._cond.notify_all()
            ok = self._cond.wait_for(lambda: not self._writer and not self._writers_waiting,
                                     timeout)
            if ok:
                self._readers += 1
            return ok

    def release(self, write: bool) -> None:
        with self._cond:
            if write:
                self._writer = False
            else:
                self._readers -= 1
            self._cond.notify_all()


class _Variable:
    def __init__(self, native: _runtime.Variable) -> None:
        self.native = native
        self.lock = _RWLock()
        self.dtype = DType(native.dtype)
        self.shape = tuple(native.shape)
        self.users: set[int] = set()  # graph ids whose models bind it

    @property
    def type_text(self) -> str:
        return f"{self.dtype.value}{list(self.shape)}"


def _type_text(dtype: np.dtype | DType, shape: Sequence[int]) -> str:
    name = dtype.value if isinstance(dtype, DType) else np.dtype(dtype).name
    return f"{name}{list(shape)}"


class VariableStore:
    """The variables of one session (`where` names it in messages) on `device`.

    `reserve(nbytes, what)` is the session's admission: a context manager that holds
    `nbytes` against its quota while new variables are made (or raises ResourceExhausted);
    once published they count in `nbytes`."""

    def __init__(self, device: _runtime.Device, where: str, reserve: Reserve) -> None:
        self._device = device
        self._where = where
        self._reserve = reserve
        self._lock = threading.Lock()  # guards the dict (held briefly; never around a wait)
        self._vars: dict[str, _Variable] = {}
        self._bytes = 0  # of the published variables; read without the lock

    # ---- what the session holds ---------------------------------------------------------
    @property
    def nbytes(self) -> int:
        return self._bytes

    def info(self) -> list[TensorInfo]:
        with self._lock:
            return [TensorInfo(name, v.dtype, v.shape) for name, v in sorted(self._vars.items())]

    def natives(self, names: Iterable[str]) -> dict[str, _runtime.Variable]:
        with self._lock:
            return {n: self._vars[n].native for n in names if n in self._vars}

    def _get(self, name: str) -> _Variable:
        v = self._vars.get(name)
        if v is None:
            raise NotFound(f"variable '{name}' not found in {self._where}", tensor=name)
        return v

    # ---- graphs -------------------------------------------------------------------------
    def declare(self, sigs: Sequence[VariableSig], graph_id: int, graph: str) -> None:
        """The variables a graph uses: those the session has must have the graph's dtype
        and shape; the others are created (bytes admitted first) with their initial value
        (or zeros). Nothing is created unless all of them can be."""
        def check() -> list[VariableSig]:
            new = []
            for s in sigs:
                have = self._vars.get(s.name)
                if have is None:
                    new.append(s)
                elif (have.dtype, have.shape) != (s.dtype, tuple(s.shape)):
                    raise InvalidInput(
                        f"graph '{graph}' declares variable '{s.name}' as "
                        f"{_type_text(s.dtype, s.shape)}; {self._where} holds it as "
                        f"{have.type_text}", graph=graph, tensor=s.name)
            return new

        with self._lock:
            new = check()
        specs = [(s.name, s.dtype.numpy, tuple(s.shape)) for s in new]
        with self._reserve(_nbytes(specs), f"graph '{graph}': creating "
                                           f"{_names(specs)}"):
            made = self._create(specs)
            for s in new:
                if s.initial is not None:
                    made[s.name].native.write(np.asarray(s.initial, order="C"))
            with self._lock:
                check()  # another graph may have made one meanwhile: same type, or refused
                self._publish({n: v for n, v in made.items() if n not in self._vars}, [])
                for s in sigs:
                    self._vars[s.name].users.add(graph_id)

    def release(self, graph_id: int) -> None:
        with self._lock:
            for v in self._vars.values():
                v.users.discard(graph_id)

    def _create(self, specs: Sequence[tuple[str, np.dtype, tuple[int, ...]]]
                ) -> dict[str, _Variable]:
        try:
            return {n: _Variable(_runtime.Variable(self._device, n, np.dtype(dtype).name,
                                                   list(shape)))
                    for n, dtype, shape in specs}
        except _runtime.Error as exc:
            raise InvalidInput(str(exc)) from None

    def _publish(self, made: Mapping[str, _Variable], replaced: Sequence[str]) -> None:
        """Under self._lock: `made` become the session's (taking the users of those they
        replace)."""
        for n, v in made.items():
            old = self._vars.get(n)
            if old is not None:
                v.users = old.users
                self._bytes -= old.native.nbytes
            self._vars[n] = v
            self._bytes += v.native.nbytes

    # ---- runs ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, reads: Iterable[str], writes: Iterable[str],
               control: RunControl | None = None, what: str = "a run") -> Iterator[None]:
        """Holds the variables' locks (exclusive for `writes`), taken in name order."""
        writes = set(writes)
        names = sorted(set(reads) | writes)
        with self._lock:
            entries = [self._get(n) for n in names]
        held: list[tuple[_RWLock, bool]] = []
        try:
            for name, entry in zip(names, entries):
                write = name in writes
                while not entry.lock.acquire(write, POLL_SECONDS if control else None):
                    control.check(f"{what} waited for variable '{name}'")
                held.append((entry.lock, write))
            yield
        finally:
            for lock, write in reversed(held):
                lock.release(write)

    # ---- values -------------------------------------------------------------------------
    def get(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Copies of the variables (all, or `names`), read together: a consistent state."""
        if names is not None and (isinstance(names, (str, bytes)) or
                                  not all(isinstance(n, str) for n in names)):
            raise InvalidInput("variable names must be a list of strings")
        with self._lock:
            wanted = sorted(self._vars) if names is None else list(dict.fromkeys(names))
            entries = {n: self._get(n) for n in wanted}
        out: dict[str, np.ndarray] = {}
        with self.locked(wanted, (), what="reading variables"):
            for n, v in entries.items():
                arr = np.empty(v.shape, v.dtype.numpy)
                v.native.read_into(arr)
                out[n] = arr
        return out

    def set(self, values: Mapping[str, np.ndarray]) -> list[str]:
        """Writes the values (all or none): a variable of another dtype or shape is replaced
        when no graph uses it, a new one is created. Returns the names written."""
        if not isinstance(values, Mapping):
            raise InvalidInput(f"variables must be a mapping of name to array, got "
                               f"{type(values).__name__}")
        arrays: dict[str, np.ndarray] = {}
        for name, value in values.items():
            if not isinstance(name, str) or not 0 < len(name) <= 4096 or \
                    any(ord(c) < 32 for c in name):
                raise InvalidInput(f"variable name {str(name)[:60]!r} must be 1 to 4096 "
                                   f"printable characters")
            try:
                arr = np.asarray(value, order="C")  # (0-d stays 0-d)
            except (TypeError, ValueError) as exc:
                raise InvalidInput(f"variable '{name}': not an array ({exc})",
                                   tensor=name) from None
            if arr.dtype.name not in VARIABLE_DTYPES or not arr.dtype.isnative:
                raise InvalidInput(f"variable '{name}': dtype {arr.dtype} is not one a "
                                   f"variable holds ({', '.join(VARIABLE_DTYPES)})",
                                   tensor=name)
            arrays[name] = arr
        return self._commit(arrays, "setting variables")

    def _commit(self, arrays: Mapping[str, np.ndarray], what: str) -> list[str]:
        def fresh() -> list[str]:
            """Names needing new bytes (new, or of another type and unused); refuses a
            type change of a variable a graph uses."""
            out = []
            for name, arr in arrays.items():
                have = self._vars.get(name)
                if have is None:
                    out.append(name)
                elif (have.dtype.numpy, have.shape) != (arr.dtype, arr.shape):
                    if have.users:
                        raise InvalidInput(
                            f"variable '{name}' is {have.type_text} and graph "
                            f"{min(have.users)} of {self._where} uses it; give a "
                            f"{have.type_text} value (or remove the graphs using it first), "
                            f"got {_type_text(arr.dtype, arr.shape)}", tensor=name)
                    out.append(name)
            return out

        with self._lock:
            grown = fresh()
        specs = [(n, arrays[n].dtype, arrays[n].shape) for n in grown]
        with self._reserve(_nbytes(specs), f"{what}: {_names(specs)}"):
            made = self._create(specs)
            for n, v in made.items():
                v.native.write(arrays[n])
            kept = [n for n in arrays if n not in made]
            # The others under their exclusive locks: no run sees half of the new state.
            with self.locked((), kept, what=what):
                with self._lock:
                    if fresh() != grown:
                        raise InvalidInput(f"{what}: the session's variables changed "
                                           f"meanwhile; try again")
                    kept_entries = {n: self._vars[n] for n in kept}
                for n, v in kept_entries.items():
                    v.native.write(arrays[n])
                with self._lock:
                    self._publish(made, grown)
        return list(arrays)

    # ---- checkpoints --------------------------------------------------------------------
    def checkpoint_chunks(self, names: Sequence[str] | None = None) -> Iterator[bytes]:
        """The checkpoint file of the variables (all, or `names`), as read together."""
        return checkpoint.checkpoint_chunks(self.get(names))

    def save(self, f: BinaryIO, names: Sequence[str] | None = None) -> int:
        return checkpoint.write_checkpoint(f, self.get(names))

    def restore(self, f: BinaryIO, size: int, source: str) -> list[str]:
        """Every variable of the checkpoint, written as `set` does (all or none)."""
        def check(entries: list[tuple[str, np.dtype, tuple[int, ...]]]) -> None:
            with self._lock:
                for name, dtype, shape in entries:
                    have = self._vars.get(name)
                    if have is not None and have.users and \
                            (have.dtype.numpy, have.shape) != (dtype, shape):
                        raise InvalidInput(
                            f"checkpoint {source} holds variable '{name}' as "
                            f"{_type_text(dtype, shape)}; {self._where} holds it as "
                            f"{have.type_text} and graph {min(have.users)} uses it",
                            tensor=name)

        values = checkpoint.read_checkpoint(f, size, source, check)
        return self._commit(values, f"restoring checkpoint {source}")

    def close(self) -> None:
        with self._lock:
            self._vars.clear()
            self._bytes = 0


def _nbytes(specs: Sequence[tuple[str, np.dtype, tuple[int, ...]]]) -> int:
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
               for _, dtype, shape in specs)


def _names(specs: Sequence[tuple[str, np.dtype, tuple[int, ...]]]) -> str:
    shown = ", ".join(f"'{n}' ({_type_text(d, s)})" for n, d, s in specs[:4])
    return f"variable{'s' if len(specs) != 1 else ''} {shown}" + (" ..." if len(specs) > 4
                                                                   else "")
