"""Plain data types of the session API, importable without the compiler or the runtime."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from graphengine.engine.dtypes import DType
from graphengine.engine.ir import Dim


@dataclasses.dataclass(frozen=True)
class SessionOptions:
    max_streams: int = 1
    memory_limit_bytes: int = 0  # 0: no limit
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def coerce(cls, value: SessionOptions | Mapping | None) -> SessionOptions:
        if value is None:
            return cls()
        if isinstance(value, SessionOptions):
            return value
        value = dict(value)
        known = {f.name for f in dataclasses.fields(cls)}
        compile_opts = dict(value.pop("options", {}) or {})
        for key in list(value):
            if key not in known:
                compile_opts[key] = value.pop(key)  # compile options given flat
        return cls(**value, options={k: str(v) for k, v in compile_opts.items()})

    def compile_options(self):
        from graphengine.engine.pipeline import CompileOptions

        opts = dict(self.options)
        opts.setdefault("max_streams", str(self.max_streams or 1))
        return CompileOptions.from_mapping(opts)


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: DType
    shape: tuple[Dim, ...] | None


@dataclasses.dataclass(frozen=True)
class GraphInfo:
    graph_id: int
    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    num_nodes: int
    compiled: bool
