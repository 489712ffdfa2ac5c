"""Stages 5 and 6, load and execute: CompiledModel -> native models -> outputs.

Device programs become native `_runtime.Model`s (streams, arena, weights uploaded once,
kernels prepared for their exact shapes). Host programs run their nodes with the numpy
reference kernels between device launches, exchanging tensors through the cut edges.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from graphengine import _runtime

from . import ops
from .errors import ExecutionError, GraphEngineError, InvalidGraph, InvalidInput
from .model import CompiledModel, DeviceProgram, HostProgram, TensorSig

_device_lock = threading.Lock()
_devices: dict[int, _runtime.Device] = {}


def default_device(threads: int = 0) -> _runtime.Device:
    """The process-wide host device (one per thread budget)."""
    with _device_lock:
        if threads not in _devices:
            _devices[threads] = _runtime.Device(threads)
        return _devices[threads]


@functools.cache
def device_kernel_ops() -> frozenset[str]:
    return frozenset(_runtime.supported_ops())


def check_inputs(name: str, sigs: Sequence[TensorSig], inputs: Mapping[str, np.ndarray]
                 ) -> dict[str, np.ndarray]:
    """Match request tensors to the signature: names, dtypes, shapes (symbols bind once)."""
    expected = {s.name for s in sigs}
    extra = sorted(set(inputs) - expected)
    if extra:
        raise InvalidInput(f"unknown input '{extra[0]}'; the graph's inputs are "
                           f"{sorted(expected)}", graph=name, tensor=extra[0])
    bound: dict[str, int] = {}
    out = {}
    for sig in sigs:
        if sig.name not in inputs:
            raise InvalidInput(f"missing input '{sig.name}' (expected {sig})", graph=name,
                               tensor=sig.name)
        arr = np.asarray(inputs[sig.name])
        if arr.dtype != sig.dtype.numpy:
            raise InvalidInput(f"input '{sig.name}': expected dtype {sig.dtype.value}, got "
                               f"{arr.dtype.name}", graph=name, tensor=sig.name)
        ok = arr.ndim == len(sig.shape)
        for want, got in zip(sig.shape, arr.shape) if ok else ():
            if isinstance(want, str):
                ok = bound.setdefault(want, got) == got
            else:
                ok = want == got
            if not ok:
                break
        if not ok:
            raise InvalidInput(f"input '{sig.name}': expected shape {sig}, got "
                               f"{arr.dtype.name}[{','.join(map(str, arr.shape))}]",
                               graph=name, tensor=sig.name)
        out[sig.name] = arr
    return out


class LoadedModel:
    """A compiled model resident on a device, ready to execute."""

    def __init__(self, compiled: CompiledModel, device: _runtime.Device | None = None) -> None:
        self.compiled = compiled
        self.device = device or default_device()
        self.natives: dict[int, _runtime.Model] = {}
        for prog in compiled.programs:
            if isinstance(prog, DeviceProgram):
                try:
                    self.natives[prog.index] = _runtime.Model(self.device,
                                                              prog.spec(compiled.name))
                except _runtime.Error as exc:
                    raise InvalidGraph(str(exc), graph=compiled.name, stage="load") from None

    @property
    def device_bytes(self) -> int:
        return self.compiled.device_bytes

    def execute(self, inputs: Mapping[str, np.ndarray],
                output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        c = self.compiled
        env: dict[str, np.ndarray] = dict(check_inputs(c.name, c.inputs, inputs))
        for prog in c.programs:
            if isinstance(prog, DeviceProgram):
                self._run_device(prog, env)
            else:
                self._run_host(prog, env)
        names = [s.name for s in c.outputs]
        wanted = list(output_names) if output_names else names
        result = {}
        for name in wanted:
            if name not in names:
                raise InvalidInput(f"unknown output '{name}'; the graph's outputs are {names}",
                                   graph=c.name, tensor=name)
            src = c.output_sources[names.index(name)]
            result[name] = c.constants[src] if src in c.constants else env[src]
        return result

    def _run_device(self, prog: DeviceProgram, env: dict[str, np.ndarray]) -> None:
        native = self.natives[prog.index]
        args = [np.asarray(env[n], order="C") for n in prog.input_names]
        try:
            outs = native.execute(args)
        except _runtime.InvalidArgument as exc:
            raise InvalidInput(str(exc), graph=self.compiled.name, stage="execute") from None
        except _runtime.Error as exc:
            raise ExecutionError(str(exc), graph=self.compiled.name, stage="execute") from None
        env.update(zip(prog.output_names, outs))

    def _run_host(self, prog: HostProgram, env: dict[str, np.ndarray]) -> None:
        for step in prog.steps:
            args = [None if n is None else env[n] if n in env else prog.constants[n]
                    for n in step.inputs]
            try:
                outs = ops.get(step.op_type).compute(args, step.attrs)
            except GraphEngineError:
                raise
            except (IndexError, KeyError) as exc:
                raise InvalidInput(f"node '{step.name}' ({step.op_type}): {exc}",
                                   graph=self.compiled.name, node=step.name,
                                   stage="execute") from None
            except Exception as exc:
                raise ExecutionError(f"node '{step.name}' ({step.op_type}): "
                                     f"{type(exc).__name__}: {exc}", graph=self.compiled.name,
                                     node=step.name, stage="execute") from None
            env.update(zip(step.outputs, (np.asarray(o) for o in outs)))

    def stats(self) -> dict:
        per = [m.stats() for m in self.natives.values()]
        total: dict = {}
        for s in per:
            for k, v in s.items():
                total[k] = total.get(k, 0) + v if isinstance(v, (int, float)) else v
        return total


def load(compiled: CompiledModel, device: _runtime.Device | None = None) -> LoadedModel:
    return LoadedModel(compiled, device)
