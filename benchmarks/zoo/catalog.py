"""The zoo's contract: where a built model lives, what it records, and the registry of builders.

A zoo model is built once into the model cache (outside git) as a folder::

    <cache>/zoo/<name>/model.onnx     the model (external data beside it if > 2 GB; none are)
    <cache>/zoo/<name>/meta.json      ZooEntry fields + what the build measured (opset, producer)
    <cache>/zoo/<name>/ref_b<B>.npz   for each batch size B in meta["batches"]: the inputs
                                      ("input:<name>") and ONNX Runtime's outputs
                                      ("output:<name>"); torch's outputs ("torch:<name>") where
                                      the model is a torch module

``<cache>`` is ``$GE_MODEL_CACHE`` or ``~/.cache/graphengine/models`` (benchmarks/common.py).
Builders register themselves with :func:`register`; ``benchmarks/zoo/build.py`` builds them and
``benchmarks/zoo/run.py`` (``make zoo``) checks GraphEngine against the references.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from common import model_cache_dir

# Batch sizes a model with a symbolic batch dimension is checked at. 3 is not a gear of
# GEARS, so a geared run pads 3 rows to 4 and must slice the padding off again.
BATCHES = (1, 3)
GEARS = (1, 4)


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: how to build it and what kind of model it is."""

    name: str
    family: str  # vision | segmentation | detection | text | audio
    source: str  # onnx (onnx.helper, torch-free) | torch (own nn.Module) | hf | wheel
    build: Callable[[Path], None] = field(compare=False, repr=False)
    # True when every input's first dim is one shared symbolic batch dim (checked at BATCHES,
    # with and without GEARS); False for models with a fixed batch (checked at batch 1 only).
    batched: bool = True
    # In the fast subset that `make test` runs (torch-free, small, quick).
    fast: bool = False
    notes: str = ""


REGISTRY: dict[str, ZooEntry] = {}


def register(entry: ZooEntry) -> ZooEntry:
    if entry.name in REGISTRY:
        raise ValueError(f"zoo model '{entry.name}' is registered twice")
    REGISTRY[entry.name] = entry
    return entry


def zoo_dir() -> Path:
    return model_cache_dir() / "zoo"


def model_dir(name: str) -> Path:
    return zoo_dir() / name


def read_meta(name: str) -> dict:
    return json.loads((model_dir(name) / "meta.json").read_text())


def write_meta(entry: ZooEntry, extra: dict) -> None:
    meta = {k: v for k, v in asdict(entry).items() if k != "build"}
    meta.update(extra)
    (model_dir(entry.name) / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))


@dataclass
class Built:
    """What a builder returns after writing ``model.onnx`` into the folder it was given.

    ``inputs(batch, seed)`` gives valid feeds (token ids inside the vocabulary, masks of 0/1,
    images of unit scale) at that batch size (any batch when the entry is not batched: the
    model's own). ``torch_outputs(feeds)``, where the model is a torch module, runs it on the
    same feeds and returns its outputs by ONNX output name (a second reference).
    """

    inputs: Callable[[int, int], dict]
    torch_outputs: Callable[[dict], dict] | None = None
    producer: str = ""  # e.g. "torch 2.13 TorchScript exporter", "Paddle2ONNX"
