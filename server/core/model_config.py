"""A repository model's configuration: the optional YAML next to (or beside) its file.

(A Triton `config.pbtxt` maps onto the same `ModelConfig`: triton_config.py. The fields
after `options` are what that form declares; the YAML form sets only `version_policy`.)

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
| `version_policy`                      | latest 1| versioned folders: `{latest: N}`,    |
|                                       |         | `all` or `{specific: [1, 3]}`        |
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Mapping
from typing import Any

import yaml

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput

from . import gears as gearing


@dataclasses.dataclass(frozen=True)
class BatchingConfig:
    max_queue_delay_ms: float = 1.0
    max_batch_size: int = 0  # 0: the largest gear


MAX_VERSION = 10**18 - 1  # a version folder's name: at most 18 digits (fits an int64)
MAX_POLICY_VERSIONS = 64  # versions a policy may name or keep: each is a loaded model


class PolicyKind(enum.Enum):
    LATEST = "latest"
    ALL = "all"
    SPECIFIC = "specific"


@dataclasses.dataclass(frozen=True)
class VersionPolicy:
    """Which version folders are served: the `num_versions` highest (the default, 1),
    all of them, or the ones listed."""

    kind: PolicyKind = PolicyKind.LATEST
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: Collection[int]) -> tuple[list[int], list[int]]:
        """(the versions to serve, ascending; the listed versions that are not there)."""
        have = sorted(available)
        if self.kind is PolicyKind.ALL:
            return have, []
        if self.kind is PolicyKind.LATEST:
            return have[-self.num_versions:], []
        return ([v for v in self.versions if v in available],
                [v for v in self.versions if v not in available])

    def describe(self) -> str:
        if self.kind is PolicyKind.LATEST:
            return f"latest {self.num_versions}"
        if self.kind is PolicyKind.ALL:
            return "all"
        return f"specific {list(self.versions)}"


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor the configuration declares: its full shape (the batch dimension included,
    as -1, when the model batches); -1 where any size goes."""

    name: str
    dtype: DType
    dims: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    gears: tuple[int, ...] = ()
    instances: int = 1
    dynamic_batching: BatchingConfig | None = None
    max_streams: int = 1
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    version_policy: VersionPolicy = VersionPolicy()
    # What a Triton config.pbtxt declares (triton_config.py); the YAML form leaves them.
    declared_max_batch_size: int | None = None  # None: not declared; 0: does not batch
    inputs: tuple[TensorSpec, ...] = ()  # () : the model's own
    outputs: tuple[TensorSpec, ...] = ()
    platform: str = ""
    default_model_filename: str = ""
    source: str = ""  # the file it came from, for messages

    @property
    def max_batch_size(self) -> int:
        """Rows one execution takes: the batching limit, else the largest gear (0: none)."""
        if self.dynamic_batching and self.dynamic_batching.max_batch_size:
            return self.dynamic_batching.max_batch_size
        return self.gears[-1] if self.gears else 0


KEYS = {"gears", "instances", "dynamic_batching", "max_streams", "options", "version_policy"}
_BATCHING_KEYS = {"max_queue_delay_ms", "max_batch_size"}


def parse(values: Any, source: str) -> ModelConfig:
    """A ModelConfig from a mapping (a YAML or JSON document); errors name `source`."""
    if values is None:
        return ModelConfig()
    if not isinstance(values, Mapping):
        raise InvalidInput(f"{source}: expected a mapping of settings, got "
                           f"{type(values).__name__}")
    unknown = sorted(str(k) for k in set(values) - KEYS)
    if unknown:
        raise InvalidInput(f"{source}: unknown setting(s) {', '.join(unknown)}; valid "
                           f"settings are {', '.join(sorted(KEYS))}")
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
        policy = _version_policy(values.get("version_policy"))
    except InvalidInput as exc:
        raise InvalidInput(f"{source}: {exc.message}") from None
    return ModelConfig(gears, instances, batching, max_streams,
                       {str(k): str(v) for k, v in options.items()}, policy, source=source)


def check_version(what: str, value: Any) -> int:
    """A version number: an integer in 1..MAX_VERSION."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VERSION:
        raise InvalidInput(f"{what} must be a version number in 1..{MAX_VERSION}, got "
                           f"{value!r:.40}")
    return value


def make_policy(kind: PolicyKind, num_versions: int = 1,
                versions: Collection[Any] = ()) -> VersionPolicy:
    """A VersionPolicy with its numbers checked (the YAML and the Triton form share this)."""
    if kind is PolicyKind.LATEST:
        if isinstance(num_versions, bool) or not isinstance(num_versions, int) or not (
                1 <= num_versions <= MAX_POLICY_VERSIONS):
            raise InvalidInput(f"version_policy latest: num_versions must be between 1 and "
                               f"{MAX_POLICY_VERSIONS}, got {num_versions!r:.40}")
        return VersionPolicy(kind, num_versions)
    if kind is PolicyKind.SPECIFIC:
        if not versions or len(versions) > MAX_POLICY_VERSIONS:
            raise InvalidInput(f"version_policy specific: give 1 to {MAX_POLICY_VERSIONS} "
                               f"versions, got {len(versions)}")
        checked = [check_version("version_policy specific: each version", v)
                   for v in versions]
        return VersionPolicy(kind, versions=tuple(sorted(set(checked))))
    return VersionPolicy(kind)


def _version_policy(value: Any) -> VersionPolicy:
    if value is None:
        return VersionPolicy()
    if value == "all":
        return make_policy(PolicyKind.ALL)
    if isinstance(value, Mapping) and len(value) == 1:
        (key, arg), = value.items()
        if key == "latest":
            return make_policy(PolicyKind.LATEST, arg)
        if key == "specific" and isinstance(arg, list):
            return make_policy(PolicyKind.SPECIFIC, versions=arg)
    raise InvalidInput(f"version_policy must be {{latest: N}}, all or {{specific: [1, 3]}}, "
                       f"got {value!r:.60}")


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
