"""Server configuration: one frozen dataclass, loaded once from YAML plus overrides.

Every setting has an embedded default, so `graphengine serve` runs with no file at all.
A YAML file is a flat mapping of the keys below; command-line flags override it.

Settings, as `key` (default): meaning.

- `host` (`127.0.0.1`): interface to bind; `0.0.0.0` / `::` for all interfaces.
- `port` (`50051`): the gRPC port, shared by every service; `0` picks a free port (printed
  in the ready line).
- `max_message_bytes` (`268435456`): largest gRPC message sent or received (256 MiB); a
  larger request gets RESOURCE_EXHAUSTED.
- `max_tensor_elements` (`0`): largest tensor accepted, in a request, as a graph's
  declared input, a compile shape or a gear's shape; `0`: what fits in one message.
- `worker_threads` (`8`): gRPC worker threads, i.e. RPCs handled at once.
- `device_threads` (`0`): threads the device runtime uses; `0`: the CPUs the process may
  use, its affinity or its cgroup CPU quota (a container's CPU limit), whichever is smaller.
- `max_sessions` (`0`): open sessions at once; `0`: no limit.
- `max_graphs_per_session` (`0`): graphs one session may hold; `0`: no limit.
- `max_nodes_per_graph` (`0`): nodes a graph may have; `0`: no limit.
- `session_memory_limit_bytes` (`0`): a session's device memory quota, checked against
  the memory plan before a load: the default and the ceiling of what CreateSession may
  ask; `0`: bounded by the device's memory only.
- `session_idle_seconds` (`3600`): a session unused this long is closed and its memory
  freed; `0`: never.
- `stream_max_inflight` (`32`): runs in flight at once on one streaming RPC.
- `model_repository` (`""`): folder of models served over KServe v2; `""`: none.
- `repository_load_threads` (`2`): repository models compiled at once.
- `model_control_mode` (`none`): which repository models load and when: `none` (all, at
  start), `explicit` (those in `load_models`, then RepositoryModelLoad / Unload), `poll`
  (all, then the folder is rescanned every `repository_poll_seconds`).
- `repository_poll_seconds` (`15`): the poll mode's interval, 0.1 .. 86400.
- `load_models` (`[]`): explicit mode: the models loaded at start (`*`: all); `--load-model
  NAME` adds to them.
- `strict_readiness` (`false`): report ready only when every repository model is ready
  (by default one model loading does not make the server unready).
- `metrics_port` (`0`): port of the Prometheus `/metrics` HTTP endpoint (on `host`);
  `0`: disabled.
- `http_port` (`8000`, Triton's): port of KServe v2 HTTP/REST (on `host`), the same models
  as the gRPC port's KServe service, and the health endpoints `/v2/health/live|ready`;
  `0` picks a free port (printed), `-1` turns HTTP off.
- `log_level` (`INFO`): DEBUG, INFO, WARNING, ERROR or CRITICAL.
- `log_format` (`kv`): `kv` (key=value lines) or `json` (one object per line).
- `grace_seconds` (`10`): on SIGTERM/SIGINT, the time in-flight work gets to finish.
- `tls_cert_file`, `tls_key_file` (`""`): PEM certificate chain and private key; with
  both, the gRPC port speaks TLS only.
- `tls_client_ca_file` (`""`): PEM CA; when set, clients must present a certificate it
  signed (mutual TLS).
- `auth_tokens` (`{}`): identity name -> bearer token; any token turns authentication on
  (health checking stays open). Tokens never appear in logs.
- `plugins` (`[]`): custom operator files loaded at start, in order: Python modules that
  call `graphengine.register_op`, and native kernel libraries (graphengine/plugin.h);
  `graphengine serve --plugin FILE` adds to them. A relative path in a file is relative to
  that file's folder. A plugin that does not load stops the start, naming it.
- `auth_tokens_env` (`GRAPHENGINE_AUTH_TOKENS`): environment variable with more tokens, as
  `name=token` pairs separated by commas.
- `replica_id` (`""`): this server's name among replicas; session ids start with it
  (`<replica_id>.<random>`) and a call for another replica's session is NOT_FOUND naming
  that replica; `""`: the host name's first label (in Kubernetes, the pod's name).
- `replica_address_format` (`""`): every replica's address, `{replica}` standing for its id
  (`{replica}.graphengine-sessions.default.svc:50051`): this server's advertised address,
  and the owner's address in that NOT_FOUND; `""`: not advertised.
- `compile_cache_dir` (`""`): folder of compiled models (server/core/compile_cache.py): a
  restart, or another replica sharing it, loads a graph compiled before instead of
  compiling it; created if missing; `""`: no cache.
- `compile_cache_max_bytes` (`4294967296`): the folder's bound (4 GiB); least recently used
  entries are deleted beyond it; 1 MiB..2**50.

Upper bounds (engine/bounds.py; beyond them the file is refused): `worker_threads` and
`device_threads` <= 1024, `stream_max_inflight` <= 4096, `repository_load_threads` <= 64,
`max_tensor_elements` <= 2**40, `plugins` <= 64 files, `load_models` <= 4096 names,
`compile_cache_max_bytes` <= 2**50.

Example `graphengine.yaml`:

    host: 0.0.0.0
    port: 50051
    metrics_port: 8002
    model_repository: /models
    worker_threads: 16
    auth_tokens: {ci: "5b0c...", dashboard: "e41f..."}
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

import yaml

from graphengine.engine.bounds import MAX_ELEMENTS

from .core.model_control import ALL_MODELS, MAX_POLL_SECONDS, MIN_POLL_SECONDS, ControlMode

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("kv", "json")
_NAME = re.compile(r"^[A-Za-z0-9_.@-]+$")


class ConfigError(ValueError):
    """A configuration file or override that cannot be used; the message says which key."""


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Settings of one server process; see the module docstring for the table of defaults."""

    host: str = "127.0.0.1"
    port: int = 50051
    max_message_bytes: int = 256 * 1024 * 1024
    max_tensor_elements: int = 0
    worker_threads: int = 8
    device_threads: int = 0
    max_sessions: int = 0
    max_graphs_per_session: int = 0
    max_nodes_per_graph: int = 0
    session_memory_limit_bytes: int = 0
    session_idle_seconds: float = 3600.0
    stream_max_inflight: int = 32
    model_repository: str = ""
    repository_load_threads: int = 2
    model_control_mode: str = "none"
    repository_poll_seconds: float = 15.0
    load_models: tuple[str, ...] = ()
    strict_readiness: bool = False
    metrics_port: int = 0
    http_port: int = 8000
    log_level: str = "INFO"
    log_format: str = "kv"
    grace_seconds: float = 10.0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    # Secrets: never in a repr, hence never in a log line or a traceback.
    auth_tokens: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)
    auth_tokens_env: str = "GRAPHENGINE_AUTH_TOKENS"
    plugins: tuple[str, ...] = ()
    replica_id: str = ""
    replica_address_format: str = ""
    compile_cache_dir: str = ""
    compile_cache_max_bytes: int = 4 << 30

    def __post_init__(self) -> None:
        # Validation lives here so that a config built in code is checked like a loaded one.
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        if not self.host:
            raise ConfigError("host: must not be empty")
        for key in ("port", "metrics_port"):
            if not 0 <= getattr(self, key) <= 65535:
                raise ConfigError(f"{key}: {getattr(self, key)} is outside 0..65535")
        if self.metrics_port and self.metrics_port == self.port:
            raise ConfigError(f"metrics_port: {self.metrics_port} is also the gRPC port")
        _check_http_port(self)
        if self.max_message_bytes < 1024:
            raise ConfigError(f"max_message_bytes: {self.max_message_bytes} is below 1024")
        if self.max_message_bytes > 2**31 - 1:
            # gRPC stores message limits in a C int.
            raise ConfigError(f"max_message_bytes: {self.max_message_bytes} exceeds 2**31-1")
        for key in ("max_tensor_elements", "device_threads", "max_sessions",
                    "max_graphs_per_session", "max_nodes_per_graph",
                    "session_memory_limit_bytes", "session_idle_seconds", "grace_seconds"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: must be >= 0, got {getattr(self, key)}")
        for key in ("worker_threads", "stream_max_inflight", "repository_load_threads"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}: must be >= 1, got {getattr(self, key)}")
        # Upper bounds: each of these sizes a pool or a queue the server allocates up front.
        for key, high in (("worker_threads", 1024), ("device_threads", 1024),
                          ("stream_max_inflight", 4096), ("repository_load_threads", 64),
                          ("max_tensor_elements", MAX_ELEMENTS)):
            if getattr(self, key) > high:
                raise ConfigError(f"{key}: {getattr(self, key)} exceeds the bound of {high}")
        if not (1 << 20) <= self.compile_cache_max_bytes <= (1 << 50):
            raise ConfigError(f"compile_cache_max_bytes: {self.compile_cache_max_bytes} is "
                              f"outside 1048576..2**50")
        level = self.log_level.upper()
        if level not in LOG_LEVELS:
            raise ConfigError(
                f"log_level: '{self.log_level}' is not one of {', '.join(LOG_LEVELS)}")
        object.__setattr__(self, "log_level", level)
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log_format: '{self.log_format}' is not one of "
                              f"{', '.join(LOG_FORMATS)}")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("tls_cert_file and tls_key_file: give both or neither")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ConfigError("tls_client_ca_file: needs tls_cert_file and tls_key_file")
        _check_tokens("auth_tokens", self.auth_tokens)
        if len(self.plugins) > MAX_PLUGINS:
            raise ConfigError(f"plugins: {len(self.plugins)} files exceed the bound of "
                              f"{MAX_PLUGINS}")
        for item in self.plugins:
            if not isinstance(item, str) or not item:
                raise ConfigError(f"plugins: each entry is a file path, got {item!r:.60}")
        object.__setattr__(self, "plugins", tuple(self.plugins))
        _check_replica(self.replica_id, self.replica_address_format)
        self._check_model_control()
        # YAML may well give an int for a float setting; store what the annotation says.
        for key in ("grace_seconds", "session_idle_seconds"):
            object.__setattr__(self, key, float(getattr(self, key)))
        object.__setattr__(self, "auth_tokens", dict(self.auth_tokens))

    def _check_model_control(self) -> None:
        if self.model_control_mode not in MODEL_CONTROL_MODES:
            raise ConfigError(f"model_control_mode: '{self.model_control_mode}' is not one of "
                              f"{', '.join(MODEL_CONTROL_MODES)}")
        if not MIN_POLL_SECONDS <= self.repository_poll_seconds <= MAX_POLL_SECONDS:
            raise ConfigError(f"repository_poll_seconds: {self.repository_poll_seconds} is "
                              f"outside {MIN_POLL_SECONDS}..{MAX_POLL_SECONDS:.0f}")
        object.__setattr__(self, "repository_poll_seconds",
                           float(self.repository_poll_seconds))
        if len(self.load_models) > MAX_LOAD_MODELS:
            raise ConfigError(f"load_models: {len(self.load_models)} names exceed the bound "
                              f"of {MAX_LOAD_MODELS}")
        for name in self.load_models:
            if not isinstance(name, str) or not (name == ALL_MODELS or _MODEL_NAME.match(name)):
                raise ConfigError(f"load_models: {name!r:.60} is not a model name")
        object.__setattr__(self, "load_models", tuple(self.load_models))
        if self.load_models and self.model_control_mode != "explicit":
            raise ConfigError(f"load_models: only with model_control_mode explicit (it is "
                              f"{self.model_control_mode}, which loads every model)")

    @property
    def tensor_element_limit(self) -> int:
        """The element limit requests and graphs get: explicit, or what fits in a message."""
        return self.max_tensor_elements or self.max_message_bytes

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)

    @property
    def auth(self) -> bool:
        return bool(self.auth_tokens)


def _check_http_port(config: ServerConfig) -> None:
    port = config.http_port
    if not -1 <= port <= 65535:
        raise ConfigError(f"http_port: {port} is outside -1..65535 (-1: no HTTP)")
    for key in ("port", "metrics_port"):
        if port > 0 and port == getattr(config, key):
            raise ConfigError(f"http_port: {port} is also the {key}")


def format_address(host: str, port: int) -> str:
    """host:port, with IPv6 literals bracketed as gRPC expects."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float),
                                       "bool": (bool,), "dict[str, str]": (dict,),
                                       "tuple[str, ...]": (list, tuple)}
MAX_PLUGINS = 64
MODEL_CONTROL_MODES = tuple(m.value for m in ControlMode)
MAX_LOAD_MODELS = 4096
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$")


def _check_type(key: str, value: Any, annotation: Any) -> None:
    expected = _TYPES[str(annotation)]
    # bool is an int subclass, but `port: true` in YAML is a mistake, not port 1.
    if (isinstance(value, bool) and bool not in expected) or not isinstance(value, expected):
        shown = "{...}" if key == "auth_tokens" else repr(value)
        raise ConfigError(f"{key}: expected {annotation}, got {type(value).__name__} {shown}")


def _check_tokens(source: str, tokens: Mapping[Any, Any]) -> None:
    seen: dict[str, str] = {}
    for name, token in tokens.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{source}: identity name {name!r} must be letters, digits or "
                              f"'_.@-'")
        if not isinstance(token, str) or len(token) < 8:
            raise ConfigError(f"{source}: the token of '{name}' must be a string of at least "
                              f"8 characters")
        if token in seen:
            raise ConfigError(f"{source}: '{name}' and '{seen[token]}' have the same token")
        seen[token] = name


def _check_replica(replica_id: str, address_format: str) -> None:
    from graphengine.server.core.replica import check_address_format, check_replica_id

    try:
        if replica_id:
            check_replica_id(replica_id)
    except ValueError as exc:
        raise ConfigError(f"replica_id: {exc}") from None
    try:
        check_address_format(address_format)
    except ValueError as exc:
        raise ConfigError(f"replica_address_format: {exc}") from None


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """`name=token` pairs separated by commas, spaces or newlines."""
    tokens: dict[str, str] = {}
    for item in re.split(r"[,\s]+", text.strip()):
        if not item:
            continue
        name, sep, token = item.partition("=")
        if not sep:
            raise ConfigError(f"{source}: expected name=token pairs, got an item without '='")
        tokens[name] = token
    _check_tokens(source, tokens)
    return tokens


def config_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(ServerConfig)]


def load_config(path: str | os.PathLike[str] | None = None,
                environ: Mapping[str, str] | None = None, **overrides: Any) -> ServerConfig:
    """Defaults, then the YAML file at `path` (if any), then `overrides`.

    Overrides whose value is None are ignored, so command-line flags that were not given
    can be passed straight through. Unknown keys, in the file or the overrides, are an
    error that names them and lists the valid ones. Tokens in the environment variable
    named by `auth_tokens_env` (read from `environ`, default os.environ) are added to the
    file's `auth_tokens`.
    """
    values: dict[str, Any] = {}
    source = "overrides"
    if path is not None:
        source = str(path)
        try:
            with open(path, encoding="utf-8") as f:
                loaded = yaml.safe_load(f)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}  # an empty file means "all defaults"
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: expected a mapping of settings, "
                              f"got {type(loaded).__name__}")
        values.update(loaded)
        folder = os.path.dirname(os.path.abspath(path))
        if isinstance(values.get("plugins"), (list, tuple)):
            values["plugins"] = [os.path.join(folder, p) if isinstance(p, str) and p
                                 and not os.path.isabs(p) else p for p in values["plugins"]]
    _reject_unknown(values, source)
    given = {k: v for k, v in overrides.items() if v is not None}
    _reject_unknown(given, "overrides")
    values.update(given)
    env_name = values.get("auth_tokens_env", ServerConfig.auth_tokens_env)
    env_text = (os.environ if environ is None else environ).get(env_name, "") if isinstance(
        env_name, str) else ""
    try:
        if env_text.strip():
            file_tokens = values.get("auth_tokens") or {}
            if not isinstance(file_tokens, dict):
                raise ConfigError("auth_tokens: expected a mapping of name: token")
            values["auth_tokens"] = {**file_tokens,
                                     **parse_tokens(env_text, f"environment {env_name}")}
        return ServerConfig(**values)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _reject_unknown(values: dict[Any, Any], source: str) -> None:
    valid = config_keys()
    unknown = sorted(str(k) for k in values if k not in valid)
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)}; "
                          f"valid settings are {', '.join(valid)}")
