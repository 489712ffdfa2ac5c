"""Server configuration: one frozen dataclass, loaded once from YAML plus overrides.

Every setting has an embedded default, so `graphengine serve` runs with no file at all.
A YAML file is a flat mapping of the keys below; command-line flags override it.

| key                   | default       | meaning                                                  |
|-----------------------|---------------|----------------------------------------------------------|
| `host`                | `127.0.0.1`   | interface to bind; `0.0.0.0` / `::` for all interfaces   |
| `port`                | `50051`       | TCP port; `0` picks a free port (printed when ready)     |
| `max_message_bytes`   | `268435456`   | largest gRPC message sent or received (256 MiB)          |
| `max_tensor_elements` | `0`           | largest tensor accepted in RunGraph, in elements; `0`    |
|                       |               | means bounded only by `max_message_bytes`                |
| `worker_threads`      | `8`           | gRPC worker threads, i.e. RPCs handled concurrently      |
| `device_threads`      | `0`           | threads the device runtime may use; `0` = all cores      |
| `max_sessions`        | `0`           | open sessions allowed at once; `0` = no limit            |
| `log_level`           | `INFO`        | DEBUG, INFO, WARNING, ERROR or CRITICAL                  |
| `grace_seconds`       | `10`          | on SIGTERM/SIGINT, time in-flight RPCs get to finish     |

Example `graphengine.yaml`:

    host: 0.0.0.0
    port: 50051
    worker_threads: 16
    log_level: DEBUG
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import yaml

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


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
    log_level: str = "INFO"
    grace_seconds: float = 10.0

    def __post_init__(self) -> None:
        # Validation lives here so that a config built in code is checked like a loaded one.
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        if not self.host:
            raise ConfigError("host: must not be empty")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port: {self.port} is outside 0..65535")
        if self.max_message_bytes < 1024:
            raise ConfigError(f"max_message_bytes: {self.max_message_bytes} is below 1024")
        if self.max_message_bytes > 2**31 - 1:
            # gRPC stores message limits in a C int.
            raise ConfigError(f"max_message_bytes: {self.max_message_bytes} exceeds 2**31-1")
        for key in ("max_tensor_elements", "device_threads", "max_sessions"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: must be >= 0, got {getattr(self, key)}")
        if self.worker_threads < 1:
            raise ConfigError(f"worker_threads: must be >= 1, got {self.worker_threads}")
        if self.grace_seconds < 0:
            raise ConfigError(f"grace_seconds: must be >= 0, got {self.grace_seconds}")
        level = self.log_level.upper()
        if level not in LOG_LEVELS:
            raise ConfigError(
                f"log_level: '{self.log_level}' is not one of {', '.join(LOG_LEVELS)}")
        object.__setattr__(self, "log_level", level)
        # YAML may well give an int for a float setting; store what the annotation says.
        object.__setattr__(self, "grace_seconds", float(self.grace_seconds))

    @property
    def tensor_element_limit(self) -> int:
        """The element limit RunGraph applies: explicit, or what fits in one message."""
        return self.max_tensor_elements or self.max_message_bytes

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)


def format_address(host: str, port: int) -> str:
    """host:port, with IPv6 literals bracketed as gRPC expects."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float)}


def _check_type(key: str, value: Any, annotation: Any) -> None:
    expected = _TYPES[str(annotation)]
    # bool is an int subclass, but `port: true` in YAML is a mistake, not port 1.
    if isinstance(value, bool) or not isinstance(value, expected):
        raise ConfigError(f"{key}: expected {annotation}, got {type(value).__name__} "
                          f"{value!r}")


def config_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(ServerConfig)]


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> ServerConfig:
    """Defaults, then the YAML file at `path` (if any), then `overrides`.

    Overrides whose value is None are ignored, so command-line flags that were not given
    can be passed straight through. Unknown keys, in the file or the overrides, are an
    error that names them and lists the valid ones.
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
    _reject_unknown(values, source)
    given = {k: v for k, v in overrides.items() if v is not None}
    _reject_unknown(given, "overrides")
    values.update(given)
    try:
        return ServerConfig(**values)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _reject_unknown(values: dict[Any, Any], source: str) -> None:
    valid = config_keys()
    unknown = sorted(str(k) for k in values if k not in valid)
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)}; "
                          f"valid settings are {', '.join(valid)}")
