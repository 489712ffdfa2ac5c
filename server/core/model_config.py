"""A repository model's configuration: the optional YAML next to (or beside) its file.

    # resnet18/config.yaml (or resnet18.yaml beside resnet18.onnx)
    gears: [1, 4, 16]          # batch sizes compiled ahead; needs a symbolic batch dim
    instances: 2               # model instances executing concurrently
    dynamic_batching:          # opt-in; needs gears
      max_queue_delay_ms: 2    # how long a request may wait for others
      max_batch_size: 16       # rows per execution; 0 or absent: the largest gear
    max_streams: 1             # compile option: streams a model may use
    options: {fuse: "true"}    # other compile options

| key                                   | default | meaning                              |
|---------------------------------------|---------|--------------------------------------|
| `gears`                               | `[]`    | batch sizes compiled ahead           |
| `instances`                           | `1`     | concurrent model instances           |
| `dynamic_batching.max_queue_delay_ms` | `1`     | longest wait for a batch to fill     |
| `dynamic_batching.max_batch_size`     | `0`     | rows per execution; 0: largest gear  |
| `max_streams`                         | `1`     | streams per compiled model           |
| `options`                             | `{}`    | compile options (name: value)        |
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import yaml

from graphengine.engine.errors import InvalidInput

from . import gears as gearing


@dataclasses.dataclass(frozen=True)
class BatchingConfig:
    max_queue_delay_ms: float = 1.0
    max_batch_size: int = 0  # 0: the largest gear


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    gears: tuple[int, ...] = ()
    instances: int = 1
    dynamic_batching: BatchingConfig | None = None
    max_streams: int = 1
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def max_batch_size(self) -> int:
        """Rows one execution takes: the batching limit, else the largest gear (0: none)."""
        if self.dynamic_batching and self.dynamic_batching.max_batch_size:
            return self.dynamic_batching.max_batch_size
        return self.gears[-1] if self.gears else 0


_KEYS = {"gears", "instances", "dynamic_batching", "max_streams", "options"}
_BATCHING_KEYS = {"max_queue_delay_ms", "max_batch_size"}


def parse(values: Any, source: str) -> ModelConfig:
    """A ModelConfig from a mapping (a YAML or JSON document); errors name `source`."""
    if values is None:
        return ModelConfig()
    if not isinstance(values, Mapping):
        raise InvalidInput(f"{source}: expected a mapping of settings, got "
                           f"{type(values).__name__}")
    unknown = sorted(str(k) for k in set(values) - _KEYS)
    if unknown:
        raise InvalidInput(f"{source}: unknown setting(s) {', '.join(unknown)}; valid "
                           f"settings are {', '.join(sorted(_KEYS))}")
    try:
        raw_gears = values.get("gears") or []
        if not isinstance(raw_gears, list):
            raise InvalidInput(f"gears must be a list of batch sizes, got {raw_gears!r}")
        gears = gearing.normalize(raw_gears)
        instances = _int(values, "instances", 1, minimum=1)
        max_streams = _int(values, "max_streams", 1, minimum=1)
        options = values.get("options") or {}
        if not isinstance(options, Mapping):
            raise InvalidInput(f"options must be a mapping, got {options!r}")
        batching = _batching(values.get("dynamic_batching"), gears)
    except InvalidInput as exc:
        raise InvalidInput(f"{source}: {exc.message}") from None
    return ModelConfig(gears, instances, batching, max_streams,
                       {str(k): str(v) for k, v in options.items()})


def _int(values: Mapping, key: str, default: int, minimum: int) -> int:
    value = values.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def _batching(value: Any, gears: tuple[int, ...]) -> BatchingConfig | None:
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, Mapping):
        raise InvalidInput(f"dynamic_batching must be a mapping, got {value!r}")
    unknown = sorted(str(k) for k in set(value) - _BATCHING_KEYS)
    if unknown:
        raise InvalidInput(f"dynamic_batching: unknown setting(s) {', '.join(unknown)}; valid "
                           f"settings are {', '.join(sorted(_BATCHING_KEYS))}")
    if not gears:
        raise InvalidInput("dynamic_batching needs gears: the batch sizes compiled ahead that "
                           "requests are combined up to")
    delay = value.get("max_queue_delay_ms", 1.0)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
        raise InvalidInput(f"dynamic_batching.max_queue_delay_ms must be >= 0, got {delay!r}")
    size = _int(value, "max_batch_size", 0, minimum=0)
    if size > gears[-1]:
        raise InvalidInput(f"dynamic_batching.max_batch_size {size} exceeds the largest gear "
                           f"{gears[-1]}")
    return BatchingConfig(float(delay), size)


def load(path: str | None) -> ModelConfig:
    """The configuration in the YAML file at `path`; defaults when there is none."""
    if path is None:
        return ModelConfig()
    try:
        with open(path, encoding="utf-8") as f:
            values = yaml.safe_load(f)
    except OSError as exc:
        raise InvalidInput(f"cannot read model config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise InvalidInput(f"model config {path} is not valid YAML: {exc}") from None
    return parse(values, path)


def parse_text(text: str, source: str) -> ModelConfig:
    """From JSON or YAML text (RepositoryModelLoad's `config` parameter)."""
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{source} is not valid JSON or YAML: {exc}") from None
    return parse(values, source)
