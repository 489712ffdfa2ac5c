"""A configuration's declared tensors (Triton's `input` / `output`) against the model's own
at load, and each request against them.

A declared dim of -1 takes any size; a fixed one must be the model's where the model fixes
it, and the request's always (the declaration may be narrower than the model: a model with
a symbolic dim may be declared with a fixed one). With `max_batch_size` > 0 the first dim of
every declared tensor is the batch (-1), and a request carries 1..max_batch_size rows.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graphengine.api.types import GraphInfo, TensorInfo
from graphengine.engine.errors import InvalidInput
from graphengine.kserve.v2 import model_config_pb2 as mc

from .model_config import ModelConfig, TensorSpec
from .triton_config import DATA_TYPES


def _type_name(spec: TensorSpec) -> str:
    code = next(k for k, v in DATA_TYPES.items() if v is spec.dtype)
    return mc.DataType.Name(code)


def check_model(config: ModelConfig, info: GraphInfo, model: str) -> None:
    """The declared inputs and outputs are the model's; InvalidInput naming the config file,
    the model and the tensor otherwise."""
    where = f"{config.source}: model '{model}'" if config.source else f"model '{model}'"
    for kind, declared, actual in (("input", config.inputs, info.inputs),
                                   ("output", config.outputs, info.outputs)):
        by_name = {t.name: t for t in actual}
        for spec in declared:
            if spec.name not in by_name:
                raise InvalidInput(f"{where}: {kind} '{spec.name}' is declared but the model "
                                   f"has no such {kind}; its {kind}s are "
                                   f"{', '.join(by_name) or 'none'}", tensor=spec.name)
            _check_tensor(where, kind, spec, by_name[spec.name],
                          bool(config.declared_max_batch_size))
    if config.inputs:
        missing = [t.name for t in info.inputs if t.name not in {s.name for s in config.inputs}]
        if missing:
            raise InvalidInput(f"{where}: the configuration declares {len(config.inputs)} "
                               f"inputs; the model's input(s) {', '.join(missing)} are not "
                               f"among them", tensor=missing[0])


def _check_tensor(where: str, kind: str, spec: TensorSpec, tensor: TensorInfo,
                  batched: bool) -> None:
    if spec.dtype is not tensor.dtype:
        raise InvalidInput(f"{where}: {kind} '{spec.name}' is declared {_type_name(spec)}; "
                           f"the model's is {tensor.dtype.value}", tensor=spec.name)
    if tensor.shape is None:
        return
    shape = list(tensor.shape)
    if len(shape) != len(spec.dims):
        hint = (" (with max_batch_size > 0, dims leave out the batch dimension)"
                if batched else "")
        raise InvalidInput(f"{where}: {kind} '{spec.name}' is declared with shape "
                           f"{list(spec.dims)}{hint}; the model's is {shape}",
                           tensor=spec.name)
    for axis, (want, have) in enumerate(zip(spec.dims, shape)):
        # (a batched tensor's first dim is declared -1; that the model's is a batch is the
        # gears' check, at add_graph)
        if want != -1 and isinstance(have, int) and want != have:
            raise InvalidInput(f"{where}: {kind} '{spec.name}' is declared with shape "
                               f"{list(spec.dims)}; the model's is {shape} (dimension "
                               f"{axis} differs)", tensor=spec.name)


def check_request(config: ModelConfig, inputs: Mapping[str, np.ndarray], model: str,
                  rows: int) -> None:
    """A request's batch and shapes against the declaration (the model checks the rest)."""
    limit = config.declared_max_batch_size
    if limit and rows > limit:
        raise InvalidInput(f"model '{model}': the request's batch of {rows} rows exceeds its "
                           f"max_batch_size of {limit}")
    for spec in config.inputs:
        if spec.name not in inputs:
            continue  # the model names what is missing
        shape = np.shape(inputs[spec.name])
        if len(shape) != len(spec.dims) or any(
                want not in (-1, have) for want, have in zip(spec.dims, shape)):
            raise InvalidInput(f"model '{model}': input '{spec.name}' has shape "
                               f"{list(shape)}; the configuration declares "
                               f"{list(spec.dims)} (-1: any size)", tensor=spec.name)
