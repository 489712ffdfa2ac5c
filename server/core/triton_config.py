"""Triton's model configuration (`config.pbtxt`) mapped onto the repository's ModelConfig.

A Triton model folder holds `config.pbtxt`, the protobuf text format of
`inference.ModelConfig` (proto/graphengine/kserve/v2/model_config.proto, every field of the
protocol's), and version folders `1/model.onnx`, `2/model.onnx`, ... protobuf's text_format
parses the file into those messages (a malformed file is an error naming its line and
column); then every field set is used, refused, or ignored with a warning:

- `name`: must be the folder's name, or absent.
- `platform`, `backend`: `onnxruntime_onnx` / `onnxruntime` and `graphengine_onnx`
  (model.onnx), `tensorflow_graphdef` / `tensorflow` (model.graphdef),
  `graphengine_offline` (model.geom), `graphengine` (the folder's one model file); others
  refused.
- `max_batch_size` (0..65536): > 0 puts a batch dim before every declared shape, lets a
  request carry at most that many rows, and compiles the model ahead for batch sizes (gears).
- `input`, `output`: name, data_type, dims (-1: any size), checked against the model at
  load, and requests against them; `format` and `label_filename` warned about; reshape,
  shape tensors, ragged batches, optional inputs, non-linear formats refused.
- `dynamic_batching`: `preferred_batch_size` are gears, `max_queue_delay_microseconds`
  (<= 10 s) the batcher's wait; ordering, priorities and queue policies refused.
- `instance_group`: the counts of KIND_CPU / KIND_AUTO groups added up are the instances
  (<= 64); KIND_GPU, KIND_MODEL, `gpus`, secondary devices, passive refused; rate limiter,
  profile, host policy warned about.
- `version_policy`: latest / all / specific. `default_model_filename`: the file looked for
  in each version folder. `parameters`: `gears` ("1,4,16") and `max_streams`; others
  warned about.
- refused: sequence batching, ensembles, batch inputs and outputs, model operations,
  repository agents, decoupled transactions, `runtime`.
- warned about and ignored (they tune or observe; results do not change): `optimization`,
  `model_warmup`, `response_cache`, `metric_tags`, `cc_model_filenames`, `model_metrics`.

Gears when `max_batch_size` > 0: the `gears` parameter, else the preferred batch sizes,
else the powers of two below `max_batch_size` (at most 15, the largest); `max_batch_size`
itself is always one, so a full batch runs as one execution.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, text_format

from graphengine.engine.bounds import (
    MAX_ELEMENTS,
    MAX_GEAR,
    MAX_GEARS,
    MAX_INSTANCES,
    MAX_RANK,
    MAX_STREAMS,
)
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput
from graphengine.kserve.v2 import model_config_pb2 as mc

from . import model_config
from .model_config import BatchingConfig, ModelConfig, PolicyKind, TensorSpec

CONFIG_NAME = "config.pbtxt"
MAX_CONFIG_BYTES = 1 << 20  # a config.pbtxt is a few hundred bytes; this is generous
MAX_TENSORS = 1024  # declared inputs or outputs of one model
MAX_NAME = 4096  # a tensor name, as the importers bound them
MAX_DELAY_US = 10_000_000  # a batcher's wait: 10 s
MAX_FILENAME = 255

DATA_TYPES: dict[int, DType] = {
    mc.TYPE_BOOL: DType.BOOL, mc.TYPE_UINT8: DType.UINT8, mc.TYPE_UINT16: DType.UINT16,
    mc.TYPE_UINT32: DType.UINT32, mc.TYPE_UINT64: DType.UINT64, mc.TYPE_INT8: DType.INT8,
    mc.TYPE_INT16: DType.INT16, mc.TYPE_INT32: DType.INT32, mc.TYPE_INT64: DType.INT64,
    mc.TYPE_FP16: DType.FLOAT16, mc.TYPE_FP32: DType.FLOAT32, mc.TYPE_FP64: DType.FLOAT64,
    mc.TYPE_BF16: DType.BFLOAT16, mc.TYPE_STRING: DType.STRING,
}
# platform or backend -> (the platform reported, the file a version folder holds; "": its
# one model file)
PLATFORMS: dict[str, tuple[str, str]] = {
    "onnxruntime_onnx": ("onnxruntime_onnx", "model.onnx"),
    "onnxruntime": ("onnxruntime_onnx", "model.onnx"),
    "graphengine_onnx": ("graphengine_onnx", "model.onnx"),
    "tensorflow_graphdef": ("tensorflow_graphdef", "model.graphdef"),
    "tensorflow": ("tensorflow_graphdef", "model.graphdef"),
    "graphengine_offline": ("graphengine_offline", "model.geom"),
    "graphengine": ("", ""),
}
# Settings that tune or observe serving but leave results alone: ignored, with a warning.
_IGNORED = {
    "optimization": "GraphEngine chooses its own optimizations",
    "model_warmup": "models are compiled and loaded ahead, for every gear",
    "response_cache": "there is no response cache",
    "metric_tags": "metrics carry the model name only",
    "cc_model_filenames": "there are no GPU compute capabilities to choose a file by",
    "model_metrics": "metrics are the server's (graphengine serve --metrics-port)",
}
# Settings that would change what a request gets: refused, with the reason.
_REFUSED = {
    "sequence_batching": "stateful sequence batching is not supported",
    "ensemble_scheduling": "ensembles are not supported; serve each model and chain them in "
                           "the client",
    "batch_input": "batch inputs are not supported",
    "batch_output": "batch outputs are not supported",
    "model_operations": "custom operator libraries load with graphengine serve --plugin",
    "model_repository_agents": "repository agents are not supported",
    "runtime": "GraphEngine is the only runtime",
}


class _Mapper:
    """One config's mapping; `fail` and `warn` name the file, the model and the field."""

    def __init__(self, source: str, model: str) -> None:
        self.source, self.model = source, model
        self.warnings: list[str] = []

    def fail(self, field: str, message: str) -> InvalidInput:
        return InvalidInput(f"{self.source}: model '{self.model}': {field}: {message}")

    def warn(self, field: str, message: str) -> None:
        self.warnings.append(f"{self.source}: model '{self.model}': {field} is ignored: "
                             f"{message}")

    def int_in(self, field: str, value: int, low: int, high: int) -> int:
        if not low <= value <= high:
            raise self.fail(field, f"{value} is outside {low}..{high}")
        return value


def load(path: str, model: str) -> tuple[ModelConfig, list[str]]:
    """The ModelConfig of the config.pbtxt at `path` for the model folder `model`, and the
    warnings about settings it ignores."""
    try:
        size = os.path.getsize(path)
        if size > MAX_CONFIG_BYTES:
            raise InvalidInput(f"{path}: model '{model}': {size} bytes exceed the bound of "
                               f"{MAX_CONFIG_BYTES} for a model configuration")
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read model config {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: model '{model}': not UTF-8 text (byte {exc.start})"
                           ) from None
    return parse_text(text, model, path)


def parse_text(text: str, model: str, source: str) -> tuple[ModelConfig, list[str]]:
    """config.pbtxt text -> (ModelConfig, warnings); errors name `source` and the line."""
    message = mc.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        where = f"{source}:{line}:{column}" if line is not None else source
        # The exception's own text starts with "line:column : "; keep only its words.
        words = str(exc).split(" : ", 1)[-1] if line is not None else str(exc)
        raise InvalidInput(f"{where}: model '{model}': not a valid model configuration: "
                           f"{words}") from None
    return from_message(message, model, source)


def parse_json(values: Mapping[str, Any], model: str, source: str
               ) -> tuple[ModelConfig, list[str]]:
    """Triton's JSON form of a configuration (what tritonclient's load_model sends)."""
    message = mc.ModelConfig()
    try:
        json_format.ParseDict(values, message)
    except json_format.ParseError as exc:
        raise InvalidInput(f"{source}: model '{model}': not a valid model configuration: "
                           f"{exc}") from None
    return from_message(message, model, source)


def from_message(msg: mc.ModelConfig, model: str, source: str
                 ) -> tuple[ModelConfig, list[str]]:
    m = _Mapper(source, model)
    if msg.name and msg.name != model:
        raise m.fail("name", f"'{msg.name:.200}' is not the model's folder name '{model}' "
                            f"(leave it out or make them the same)")
    for field, why in _REFUSED.items():
        if _is_set(msg, field):
            raise m.fail(field, why)
    if msg.HasField("model_transaction_policy") and msg.model_transaction_policy.decoupled:
        raise m.fail("model_transaction_policy.decoupled", "decoupled models (many responses "
                     "per request) are not supported")
    for field, why in _IGNORED.items():
        if _is_set(msg, field):
            m.warn(field, why)
    platform, filename = _platform(m, msg)
    max_batch = m.int_in("max_batch_size", msg.max_batch_size, 0, MAX_GEAR)
    batch_dims = (-1,) if max_batch else ()
    inputs = _tensors(m, "input", msg.input, batch_dims)
    outputs = _tensors(m, "output", msg.output, batch_dims)
    gears, max_streams = _parameters(m, msg, max_batch)
    batching = None
    if msg.HasField("dynamic_batching"):
        batching, preferred = _dynamic_batching(m, msg.dynamic_batching, max_batch)
        gears = gears or preferred
    if max_batch:
        gears = _gears(m, gears, max_batch)
    return ModelConfig(
        gears=gears, instances=_instances(m, msg.instance_group), dynamic_batching=batching,
        max_streams=max_streams, version_policy=_version_policy(m, msg),
        declared_max_batch_size=max_batch, inputs=inputs, outputs=outputs, platform=platform,
        default_model_filename=filename, source=source), m.warnings


def _is_set(msg: Any, field: str) -> bool:
    value = getattr(msg, field)
    if isinstance(value, (str, int, float, bool)):
        return bool(value)
    if hasattr(value, "ListFields"):
        return msg.HasField(field)
    return len(value) > 0  # a repeated field or a map


def _platform(m: _Mapper, msg: mc.ModelConfig) -> tuple[str, str]:
    """(the platform reported, the model file name of a version folder; "": any one)."""
    known = ", ".join(sorted(PLATFORMS))
    chosen = []
    for field in ("platform", "backend"):
        value = getattr(msg, field)
        if value and value not in PLATFORMS:
            raise m.fail(field, f"'{value:.100}' is not served by GraphEngine; it serves "
                                f"{known}")
        if value:
            chosen.append(PLATFORMS[value])
    if len(chosen) == 2 and chosen[0][0] != chosen[1][0] and "" not in (chosen[0][0],
                                                                        chosen[1][0]):
        raise m.fail("backend", f"'{msg.backend}' is not the backend of platform "
                                f"'{msg.platform}'")
    platform, filename = next((c for c in chosen if c[0]), chosen[0] if chosen else ("", ""))
    if msg.default_model_filename:
        filename = msg.default_model_filename
        if (len(filename) > MAX_FILENAME or filename in (".", "..") or "/" in filename
                or "\\" in filename or "\0" in filename):
            raise m.fail("default_model_filename", f"'{filename:.100}' must be a file name in "
                                                   f"the version folder (no path)")
    return platform, filename


def _tensors(m: _Mapper, kind: str, items: Any, batch_dims: tuple[int, ...]
             ) -> tuple[TensorSpec, ...]:
    if len(items) > MAX_TENSORS:
        raise m.fail(kind, f"{len(items)} entries exceed the bound of {MAX_TENSORS}")
    specs: list[TensorSpec] = []
    for i, t in enumerate(items):
        field = f"{kind}[{i}]" if not t.name else f"{kind} '{t.name:.200}'"
        if not t.name or len(t.name) > MAX_NAME:
            raise m.fail(field, f"needs a name of 1 to {MAX_NAME} characters")
        if any(s.name == t.name for s in specs):
            raise m.fail(field, "is declared twice")
        for flag in ("is_shape_tensor", "allow_ragged_batch", "optional",
                     "is_non_linear_format_io"):
            if getattr(t, flag, False):
                raise m.fail(f"{field}.{flag}", "is not supported")
        if t.HasField("reshape"):
            raise m.fail(f"{field}.reshape", "is not supported: declare the model's own "
                                             "shape in dims")
        if getattr(t, "format", 0):
            m.warn(f"{field}.format", "the model's own layout is used")
        if getattr(t, "label_filename", ""):
            m.warn(f"{field}.label_filename", "classification outputs are not supported")
        dtype = DATA_TYPES.get(t.data_type)
        if dtype is None:
            raise m.fail(f"{field}.data_type", "needs a data type (TYPE_FP32, TYPE_INT64, ...)")
        if dtype is DType.STRING:
            raise m.fail(f"{field}.data_type", "TYPE_STRING tensors are not supported")
        if len(t.dims) + len(batch_dims) > MAX_RANK:
            raise m.fail(f"{field}.dims", f"rank {len(t.dims) + len(batch_dims)} exceeds the "
                                          f"bound of {MAX_RANK}")
        for d in t.dims:
            if d != -1 and not 0 <= d <= MAX_ELEMENTS:
                raise m.fail(f"{field}.dims", f"{d} is neither -1 nor a size in "
                                              f"0..{MAX_ELEMENTS}")
        if math.prod(max(d, 1) for d in t.dims) > MAX_ELEMENTS:
            raise m.fail(f"{field}.dims", f"{list(t.dims)} exceeds the bound of "
                                          f"{MAX_ELEMENTS} elements")
        specs.append(TensorSpec(t.name, dtype, batch_dims + tuple(int(d) for d in t.dims)))
    return tuple(specs)


def _parameters(m: _Mapper, msg: mc.ModelConfig, max_batch: int) -> tuple[tuple[int, ...], int]:
    gears: tuple[int, ...] = ()
    max_streams = 1
    for key in sorted(msg.parameters):
        value = msg.parameters[key].string_value
        if key == "gears":
            if not max_batch:
                raise m.fail("parameters.gears", "gears need max_batch_size > 0")
            try:
                gears = tuple(int(v) for v in value.split(",") if v.strip())
            except ValueError:
                raise m.fail("parameters.gears", f"'{value:.100}' is not a list of batch "
                                                 f"sizes like \"1,4,16\"") from None
        elif key == "max_streams":
            try:
                max_streams = m.int_in("parameters.max_streams", int(value), 1, MAX_STREAMS)
            except ValueError:
                raise m.fail("parameters.max_streams", f"'{value:.100}' is not an integer"
                             ) from None
        else:
            m.warn(f"parameters '{key:.100}'", "GraphEngine knows the parameters gears and "
                                               "max_streams")
    return gears, max_streams


def _dynamic_batching(m: _Mapper, b: mc.ModelDynamicBatching, max_batch: int
                      ) -> tuple[BatchingConfig, tuple[int, ...]]:
    if not max_batch:
        raise m.fail("dynamic_batching", "needs max_batch_size > 0")
    if b.preserve_ordering:
        raise m.fail("dynamic_batching.preserve_ordering", "is not supported")
    for field in ("priority_levels", "default_priority_level", "priority_queue_policy",
                  "default_queue_policy"):
        if _is_set(b, field):
            raise m.fail(f"dynamic_batching.{field}", "priorities and queue policies are not "
                                                      "supported")
    if len(b.preferred_batch_size) > MAX_GEARS:
        raise m.fail("dynamic_batching.preferred_batch_size",
                     f"{len(b.preferred_batch_size)} sizes exceed the bound of {MAX_GEARS}")
    for size in b.preferred_batch_size:
        m.int_in("dynamic_batching.preferred_batch_size", size, 1, max_batch)
    delay = m.int_in("dynamic_batching.max_queue_delay_microseconds",
                     b.max_queue_delay_microseconds, 0, MAX_DELAY_US)
    return BatchingConfig(delay / 1e3, max_batch), tuple(b.preferred_batch_size)


def _gears(m: _Mapper, gears: tuple[int, ...], max_batch: int) -> tuple[int, ...]:
    for g in gears:
        m.int_in("gears", g, 1, max_batch)
    if not gears:
        powers = [1 << i for i in range(max_batch.bit_length()) if (1 << i) < max_batch]
        gears = tuple(powers[-(MAX_GEARS - 1):])
    chosen = tuple(sorted(set(gears) | {max_batch}))
    if len(chosen) > MAX_GEARS:
        raise m.fail("gears", f"{len(chosen)} batch sizes (max_batch_size included) exceed "
                              f"the bound of {MAX_GEARS}")
    return chosen


def _instances(m: _Mapper, groups: Any) -> int:
    total = 0
    for i, g in enumerate(groups):
        field = f"instance_group[{i}]"
        if g.kind == mc.ModelInstanceGroup.KIND_GPU:
            raise m.fail(f"{field}.kind", "KIND_GPU: GraphEngine runs models on the CPU; use "
                                          "KIND_CPU")
        if g.kind == mc.ModelInstanceGroup.KIND_MODEL:
            raise m.fail(f"{field}.kind", "KIND_MODEL is not supported; use KIND_CPU")
        if g.gpus:
            raise m.fail(f"{field}.gpus", "GraphEngine runs models on the CPU")
        if g.secondary_devices:
            raise m.fail(f"{field}.secondary_devices", "is not supported")
        if g.passive:
            raise m.fail(f"{field}.passive", "passive instances are not supported")
        for extra in ("rate_limiter", "profile", "host_policy"):
            if _is_set(g, extra):
                m.warn(f"{field}.{extra}", "instances are not rate limited or placed")
        if g.count < 0:
            raise m.fail(f"{field}.count", f"{g.count} is negative")
        total += g.count or 1  # Triton's default: one instance
        if total > MAX_INSTANCES:
            raise m.fail("instance_group", f"{total} instances exceed the bound of "
                                           f"{MAX_INSTANCES}")
    return total or 1


def _version_policy(m: _Mapper, msg: mc.ModelConfig) -> model_config.VersionPolicy:
    if not msg.HasField("version_policy"):
        return model_config.VersionPolicy()
    p = msg.version_policy
    choice = p.WhichOneof("policy_choice")
    try:
        if choice == "all":
            return model_config.make_policy(PolicyKind.ALL)
        if choice == "specific":
            return model_config.make_policy(PolicyKind.SPECIFIC,
                                            versions=list(p.specific.versions))
        return model_config.make_policy(PolicyKind.LATEST, p.latest.num_versions or 1)
    except InvalidInput as exc:
        raise m.fail("version_policy", exc.message) from None
