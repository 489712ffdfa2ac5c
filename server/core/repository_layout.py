"""What a model repository folder holds: the models, their configurations and versions.

    models/
      resnet18/              a folder: the model is named after it
        model.onnx           its one model file (.onnx, a frozen TensorFlow graph .pb, or an
                             offline model .om / .geom): version 1
        config.yaml          optional: gears, instances, dynamic batching (model_config)
      mlp.onnx               a file: the model is named after its stem (version 1)
      mlp.yaml               optional config beside it
      densenet/              Triton's layout: version folders
        config.pbtxt         optional: Triton's model configuration (triton_config), or
                             config.yaml
        1/model.onnx         version 1 (the file: default_model_filename, the platform's
        3/model.onnx         name, or the folder's one model file)

A version folder is named by a number without leading zeros (Triton's rule); other
subfolders are not versions and are left alone. `plan` reads a model's configuration and
says which file each version the policy selects loads from; `stamp` fingerprints what a
model's files are, so a poll reloads only what changed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

import yaml

from graphengine.engine.errors import InvalidInput

from . import model_config, triton_config
from .model_config import MAX_VERSION, ModelConfig

MODEL_SUFFIXES = (".onnx", ".pb", ".om", ".geom")
VERSION_SUFFIXES = (*MODEL_SUFFIXES, ".graphdef")  # Triton's name for a TensorFlow graph
CONFIG_NAMES = ("config.yaml", "config.yml", triton_config.CONFIG_NAME)
SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_VERSION = re.compile(r"^[1-9][0-9]*$")
MAX_STAMP_FILES = 10_000  # files fingerprinted per model (a poll reads no more)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    name: str
    model_path: str | None  # the one model file (version 1); None in the versioned layout
    config_path: str | None
    folder: str | None = None  # the model's folder, in the versioned layout

    @property
    def versioned(self) -> bool:
        return self.folder is not None


@dataclasses.dataclass(frozen=True)
class Plan:
    """What loading a model means now: its configuration, the file of each version the
    policy selects, and why a selected version cannot load."""

    config: ModelConfig
    warnings: tuple[str, ...]
    files: dict[int, str]
    problems: dict[int, str]


def _stem(filename: str) -> str:
    return filename[:filename.rindex(".")]


def parse_version(name: str) -> int | None:
    """A version folder's (or a request's) version number; None if `name` is not one."""
    if len(name) > len(str(MAX_VERSION)) or not _VERSION.match(name):
        return None
    return int(name)


def _is_version(name: str) -> bool:
    return parse_version(name) is not None


def scan(root: str) -> tuple[dict[str, ModelSource], dict[str, str]]:
    """The models under `root`, and the names whose folder cannot be served (-> reason)."""
    sources: dict[str, ModelSource] = {}
    problems: dict[str, str] = {}
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.startswith("."):
            continue
        if os.path.isdir(path):
            name = entry
            source = _folder(name, path, problems)
            if source is None:
                continue
        elif entry.endswith(MODEL_SUFFIXES):
            name = _stem(entry)
            config = next((os.path.join(root, name + s) for s in (".yaml", ".yml")
                           if os.path.isfile(os.path.join(root, name + s))), None)
            source = ModelSource(name, path, config)
        else:
            continue
        if not SAFE_NAME.match(name):
            problems[name] = f"'{name}' is not a usable model name (letters, digits, '_.-')"
        elif name in sources:
            first = sources.pop(name)
            problems[name] = (f"two models are named '{name}': "
                              f"{first.model_path or first.folder} and "
                              f"{source.model_path or source.folder}")
        elif name not in problems:
            sources[name] = source
    return sources, problems


def _folder(name: str, path: str, problems: dict[str, str]) -> ModelSource | None:
    entries = sorted(os.listdir(path))
    configs = [c for c in CONFIG_NAMES if os.path.isfile(os.path.join(path, c))]
    if len(configs) > 1:
        problems[name] = f"folder {path} holds {' and '.join(configs)}; keep one"
        return None
    config = os.path.join(path, configs[0]) if configs else None
    files = [f for f in entries if f.endswith(MODEL_SUFFIXES)
             and os.path.isfile(os.path.join(path, f))]
    versions = [v for v in entries if _is_version(v) and os.path.isdir(os.path.join(path, v))]
    if versions:
        if files:
            problems[name] = (f"folder {path} holds version folders ({', '.join(versions)}) "
                              f"and a model file beside them ({', '.join(files)}); a "
                              f"versioned model keeps its files in the version folders")
            return None
        return ModelSource(name, None, config, folder=path)
    if len(files) != 1:
        problems[name] = (f"folder {path} holds {len(files)} model files "
                          f"({', '.join(files) or 'none'}) and no version folders (1/, 2/, "
                          f"...); it needs exactly one model file, or version folders")
        return None
    return ModelSource(name, os.path.join(path, files[0]), config)


def version_folders(folder: str) -> dict[int, str]:
    return {int(v): os.path.join(folder, v) for v in sorted(os.listdir(folder))
            if _is_version(v) and os.path.isdir(os.path.join(folder, v))}


def read_config(source: ModelSource, config_text: str | None = None
                ) -> tuple[ModelConfig, list[str]]:
    """The model's configuration: `config_text` (RepositoryModelLoad's parameter: the YAML
    form, or Triton's JSON form) when given, else its file's; defaults without one."""
    if config_text is not None:
        return config_from_text(config_text, source.name, "the 'config' parameter")
    path = source.config_path
    if path is not None and path.endswith(triton_config.CONFIG_NAME):
        return triton_config.load(path, source.name)
    return model_config.load(path), []


def config_from_text(text: str, model: str, source: str) -> tuple[ModelConfig, list[str]]:
    try:
        values: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{source} is not valid JSON or YAML: {exc}") from None
    if isinstance(values, dict) and not set(map(str, values)) <= model_config.KEYS:
        return triton_config.parse_json(values, model, source)
    return model_config.parse(values, source), []


def plan(source: ModelSource, config_text: str | None = None) -> Plan:
    """Read the configuration and resolve the versions to load; InvalidInput when the model
    as a whole cannot load (its configuration, or no version to serve)."""
    config, warnings = read_config(source, config_text)
    policy = config.version_policy
    if not source.versioned:
        assert source.model_path is not None
        chosen, missing = policy.select([1])
        if not chosen:
            raise InvalidInput(f"model '{source.name}': its version policy "
                               f"({policy.describe()}) selects no version; a model file "
                               f"outside version folders is version 1")
        return Plan(config, tuple(warnings), {1: source.model_path}, {})
    assert source.folder is not None
    folders = version_folders(source.folder)
    chosen, missing = policy.select(folders)
    if not chosen and not missing:
        raise InvalidInput(f"model '{source.name}': folder {source.folder} has no version "
                           f"folders (1/, 2/, ...)")
    files: dict[int, str] = {}
    problems = {v: f"version folder {v}/ does not exist (the version policy, "
                   f"{policy.describe()}, names it)" for v in missing}
    for v in chosen:
        try:
            files[v] = _model_file(folders[v], config.default_model_filename)
        except InvalidInput as exc:
            problems[v] = exc.message
    return Plan(config, tuple(warnings), files, problems)


def _model_file(folder: str, filename: str) -> str:
    if filename:
        path = os.path.join(folder, filename)
        if not os.path.isfile(path):
            raise InvalidInput(f"{folder} has no {filename}")
        return path
    found = [f for f in sorted(os.listdir(folder)) if f.endswith(VERSION_SUFFIXES)
             and os.path.isfile(os.path.join(folder, f))]
    if len(found) != 1:
        raise InvalidInput(f"{folder} holds {len(found)} model files "
                           f"({', '.join(found) or 'none'}); it needs exactly one, or "
                           f"default_model_filename in config.pbtxt")
    return os.path.join(folder, found[0])


def stamp(path: str | None) -> tuple:
    """A fingerprint of a file or of a folder's files (name, size, modification time):
    equal stamps, same files. At most MAX_STAMP_FILES files are read."""
    if path is None:
        return ()
    try:
        st = os.stat(path)
    except OSError:
        return ("missing",)
    if not os.path.isdir(path):
        return ((os.path.basename(path), st.st_size, st.st_mtime_ns),)
    found: list[tuple[str, int, int]] = []
    for top, dirs, names in os.walk(path):
        dirs.sort()
        for n in sorted(names):
            full = os.path.join(top, n)
            try:
                s = os.stat(full)
            except OSError:
                continue
            found.append((os.path.relpath(full, path), s.st_size, s.st_mtime_ns))
            if len(found) >= MAX_STAMP_FILES:
                return tuple(found)
    return tuple(found)


def model_stamp(source: ModelSource) -> tuple:
    """Everything a model's load depends on: its configuration file and its model files."""
    if source.versioned:
        assert source.folder is not None
        files = stamp(source.folder)
    else:
        files = stamp(source.model_path)
    return (source, stamp(source.config_path), files)
