"""The KServe v2 `inference.GRPCInferenceService` servicer over the model repository.

Thin like the session servicer: proto -> numpy (kserve_codec) -> the repository's served
model -> proto. Errors are domain exceptions mapped in graphengine.server.rpc.errors; inside
ModelStreamInfer a failed request is answered with `error_message` and the stream goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

import grpc

import graphengine
from graphengine.api.types import RunControl
from graphengine.engine.errors import FailedPrecondition, InvalidInput, NotFound
from graphengine.kserve.v2 import grpc_service_pb2 as pb
from graphengine.kserve.v2 import grpc_service_pb2_grpc
from graphengine.kserve.v2 import model_config_pb2 as mc

from ..core.model_config import PolicyKind
from ..core.repository import ModelRepository
from ..core.served_model import ServedModel
from ..lifecycle import Lifecycle
from ..timing import StageTimes, stage
from . import calls
from . import kserve_codec as codec
from .streams import StreamRunner

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
EXTENSIONS = ("model_repository", "model_configuration", "statistics")
_UNSUPPORTED_OUTPUT_PARAMETERS = ("classification",)
# (model, outputs by name, the names to send in order) -> the response
Encoder = Callable[[ServedModel, Mapping[str, Any], Sequence[str]], Any]


class InferenceServicer(grpc_service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, repository: ModelRepository | None, *, ready: Callable[[], bool],
                 max_tensor_elements: int | None = None,
                 stream_executor: Executor | None = None, stream_max_inflight: int = 32,
                 lifecycle: Lifecycle | None = None, metrics: Any = None) -> None:
        self._repo = repository
        self._ready = ready
        self._max_elements = max_tensor_elements
        self._executor = stream_executor
        self._max_inflight = stream_max_inflight
        self._lifecycle = lifecycle or Lifecycle()
        self._metrics = metrics

    def _repository(self) -> ModelRepository:
        if self._repo is None:
            raise FailedPrecondition("this server runs without a model repository "
                                     "(graphengine serve --model-repository DIR)")
        return self._repo

    def _model(self, name: str, version: str = "") -> ServedModel:
        if self._repo is None:
            raise NotFound(f"model '{name}' is not served: the server has no model repository")
        return self._repo.get(name, version)

    # ---- health and metadata -------------------------------------------------------------
    def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    def ServerReady(self, request: pb.ServerReadyRequest, context: Any
                    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._ready())

    def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        try:
            self._model(request.name, request.version)
        except Exception:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Any
                       ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="graphengine", version=graphengine.__version__,
                                         extensions=EXTENSIONS)

    def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any
                      ) -> pb.ModelMetadataResponse:
        model = self._model(request.name, request.version)

        def tensors(specs) -> list:
            return [pb.ModelMetadataResponse.TensorMetadata(
                name=name, datatype=codec.datatype_name(dtype), shape=dims)
                for name, dtype, dims in specs]

        # Without a version asked for: every version that is ready (Triton's answer).
        versions = [model.version] if request.version else self._repo.versions(model.name)
        return pb.ModelMetadataResponse(name=model.name, versions=versions,
                                        platform=_platform(model),
                                        inputs=tensors(_tensors(model, "inputs")),
                                        outputs=tensors(_tensors(model, "outputs")))

    def ModelConfig(self, request: pb.ModelConfigRequest, context: Any
                    ) -> pb.ModelConfigResponse:
        model = self._model(request.name, request.version)
        return pb.ModelConfigResponse(config=_config(model))

    def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Any
                        ) -> pb.ModelStatisticsResponse:
        if request.name:
            self._model(request.name, request.version)  # NotFound / Unavailable
            models = self._repo.models(request.name, request.version)
        else:
            models = self._repo.models() if self._repo is not None else []
        return pb.ModelStatisticsResponse(model_stats=[_statistics(m) for m in models])

    # ---- inference -----------------------------------------------------------------------
    def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        return self.infer(request, calls.run_control(context), calls.times())

    def infer(self, request: pb.ModelInferRequest, control: RunControl | None,
              times: StageTimes | None, *, raw: Sequence[bytes | memoryview] | None = None,
              encode: Encoder | None = None) -> Any:
        """One inference, for ModelInfer, ModelStreamInfer and the HTTP front end: `raw`
        replaces the request's raw_input_contents and `encode(model, outputs, names)` makes
        the response (default: the ModelInferResponse message)."""
        if not request.model_name:
            raise InvalidInput("model_name is empty")
        if self._repo is None:
            self._model(request.model_name)  # raises NotFound
        wanted = []
        for out in request.outputs:
            bad = [p for p in _UNSUPPORTED_OUTPUT_PARAMETERS if p in out.parameters]
            if bad:
                raise InvalidInput(f"output '{out.name}': parameter '{bad[0]}' is not supported",
                                   tensor=out.name)
            wanted.append(out.name)
        if len(set(wanted)) != len(wanted):
            raise InvalidInput(f"outputs has duplicates: {wanted}")
        with self._repo.serving(request.model_name, request.model_version, times) as model:
            with stage(times, "input_copy"):
                inputs = codec.decode_inputs(request, self._max_elements, raw)
            outputs = model.infer(inputs, wanted or None, control, times or StageTimes())
            with stage(times, "output_copy"):
                names = wanted or model.output_names
                if encode is not None:
                    return encode(model, outputs, names)
                response = pb.ModelInferResponse(model_name=model.name,
                                                 model_version=model.version, id=request.id)
                codec.encode_outputs(response, outputs, names)
        return response

    def ModelStreamInfer(self, request_iterator: Iterable[pb.ModelInferRequest], context: Any
                         ) -> Iterator[pb.ModelStreamInferResponse]:
        if self._executor is None:
            raise NotImplementedError("this server runs no stream executor")
        control = calls.run_control(context)

        def handle(request: pb.ModelInferRequest, times: StageTimes
                   ) -> pb.ModelStreamInferResponse:
            return pb.ModelStreamInferResponse(infer_response=self.infer(request, control,
                                                                         times))

        def error_item(request: pb.ModelInferRequest | None, status: grpc.StatusCode,
                       message: str) -> pb.ModelStreamInferResponse:
            response = pb.ModelInferResponse()
            if request is not None:
                response.model_name, response.model_version = (request.model_name,
                                                               request.model_version)
                response.id = request.id
            return pb.ModelStreamInferResponse(error_message=message, infer_response=response)

        runner = StreamRunner(method=f"/{SERVICE_NAME}/ModelStreamInfer",
                              executor=self._executor, max_inflight=self._max_inflight,
                              lifecycle=self._lifecycle, handle=handle, error_item=error_item,
                              observe=self._metrics.observe_request if self._metrics else None)
        yield from runner.serve(request_iterator, context)

    # ---- repository ----------------------------------------------------------------------
    def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Any
                        ) -> pb.RepositoryIndexResponse:
        entries = self._repo.index(request.ready) if self._repo is not None else []
        return pb.RepositoryIndexResponse(models=[
            pb.RepositoryIndexResponse.ModelIndex(name=e.name, version=e.version,
                                                  state=e.state.value, reason=e.reason)
            for e in entries])

    def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest, context: Any
                            ) -> pb.RepositoryModelLoadResponse:
        repo = self._repository()
        config = None
        if "config" in request.parameters:
            config = request.parameters["config"].string_param
        unknown = sorted(set(request.parameters) - {"config"})
        if unknown:
            raise InvalidInput(f"RepositoryModelLoad: unsupported parameter '{unknown[0]}'; "
                               f"only 'config' (JSON or YAML) is")
        repo.load(request.model_name, config)
        return pb.RepositoryModelLoadResponse()

    def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest, context: Any
                              ) -> pb.RepositoryModelUnloadResponse:
        self._repository().unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()


def _platform(model: ServedModel) -> str:
    if model.config.platform:
        return model.config.platform
    return "graphengine_onnx" if model.path.endswith(".onnx") else "graphengine_offline"


def _tensors(model: ServedModel, kind: str) -> list[tuple[str, Any, list[int]]]:
    """(name, dtype, full shape) of the model's inputs or outputs: the declared ones (a
    Triton config.pbtxt's, which may be narrower than the model's), else the model's."""
    declared = getattr(model.config, kind)
    if declared:
        return [(s.name, s.dtype, list(s.dims)) for s in declared]
    return [(t.name, t.dtype, codec.dims(t.shape)) for t in getattr(model.info, kind)]


def _config(model: ServedModel) -> mc.ModelConfig:
    """The model's configuration as Triton's message: what config.pbtxt declared, or what
    the YAML form and the model say (max_batch_size: the largest gear)."""
    cfg = model.config
    if cfg.declared_max_batch_size is not None:
        batch = cfg.declared_max_batch_size
    else:
        batch = cfg.max_batch_size if cfg.gears else 0

    def entries(kind: str, message) -> list:
        return [message(name=name, data_type=codec.CONFIG_TYPES.get(dtype, 0),
                        dims=dims[1:] if batch else dims)
                for name, dtype, dims in _tensors(model, kind)]

    config = mc.ModelConfig(
        name=model.name, platform=_platform(model), backend="graphengine",
        max_batch_size=batch, input=entries("inputs", mc.ModelInput),
        output=entries("outputs", mc.ModelOutput),
        instance_group=[mc.ModelInstanceGroup(name=model.name, count=cfg.instances,
                                              kind=mc.ModelInstanceGroup.KIND_CPU)],
        default_model_filename=cfg.default_model_filename)
    policy = cfg.version_policy
    if policy.kind is PolicyKind.ALL:
        config.version_policy.all.SetInParent()
    elif policy.kind is PolicyKind.SPECIFIC:
        config.version_policy.specific.versions.extend(policy.versions)
    else:
        config.version_policy.latest.num_versions = policy.num_versions
    if cfg.gears:
        config.parameters["gears"].string_value = ",".join(map(str, cfg.gears))
    if cfg.max_streams != 1:
        config.parameters["max_streams"].string_value = str(cfg.max_streams)
    if cfg.dynamic_batching is not None:
        config.dynamic_batching.preferred_batch_size.extend(cfg.gears)
        config.dynamic_batching.max_queue_delay_microseconds = int(
            cfg.dynamic_batching.max_queue_delay_ms * 1000)
    return config


def _duration(d) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=d.count, ns=d.ns)


def _statistics(model: ServedModel) -> pb.ModelStatistics:
    s = model.stats.snapshot()
    return pb.ModelStatistics(
        name=model.name, version=model.version, last_inference=s.last_inference_ms,
        inference_count=s.inference_count, execution_count=s.execution_count,
        inference_stats=pb.InferStatistics(
            success=_duration(s.success), fail=_duration(s.fail), queue=_duration(s.queue),
            compute_input=_duration(s.compute_input), compute_infer=_duration(s.compute_infer),
            compute_output=_duration(s.compute_output)),
        batch_stats=[pb.InferBatchStatistics(
            batch_size=rows, compute_input=_duration(b.compute_input),
            compute_infer=_duration(b.compute_infer), compute_output=_duration(b.compute_output))
            for rows, b in sorted(s.batches.items())],
        memory_usage=[pb.MemoryUsage(type="CPU", id=0, byte_size=model.device_bytes)])
