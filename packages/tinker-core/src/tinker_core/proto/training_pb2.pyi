from tinker_core.proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_REASON_UNSPECIFIED: _ClassVar[StopReason]
    STOP_REASON_LENGTH: _ClassVar[StopReason]
    STOP_REASON_STOP_TOKEN: _ClassVar[StopReason]
    STOP_REASON_STOP_STRING: _ClassVar[StopReason]
STOP_REASON_UNSPECIFIED: StopReason
STOP_REASON_LENGTH: StopReason
STOP_REASON_STOP_TOKEN: StopReason
STOP_REASON_STOP_STRING: StopReason

class CreateTrainingSessionRequest(_message.Message):
    __slots__ = ("base_model", "lora_rank", "lora_alpha", "lora_dropout", "lora_target_modules", "seed", "request_id", "options_json")
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    LORA_ALPHA_FIELD_NUMBER: _ClassVar[int]
    LORA_DROPOUT_FIELD_NUMBER: _ClassVar[int]
    LORA_TARGET_MODULES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    base_model: str
    lora_rank: int
    lora_alpha: float
    lora_dropout: float
    lora_target_modules: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    request_id: str
    options_json: str
    def __init__(self, base_model: _Optional[str] = ..., lora_rank: _Optional[int] = ..., lora_alpha: _Optional[float] = ..., lora_dropout: _Optional[float] = ..., lora_target_modules: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., request_id: _Optional[str] = ..., options_json: _Optional[str] = ...) -> None: ...

class TrainingSession(_message.Message):
    __slots__ = ("session_id", "info")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    info: ModelInfo
    def __init__(self, session_id: _Optional[str] = ..., info: _Optional[_Union[ModelInfo, _Mapping]] = ...) -> None: ...

class GetInfoRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("base_model", "lora_rank", "lora_alpha", "tokenizer_id", "vocab_size", "step", "model_type", "trainable_parameters", "context_length")
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    LORA_ALPHA_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_ID_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    MODEL_TYPE_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    base_model: str
    lora_rank: int
    lora_alpha: float
    tokenizer_id: str
    vocab_size: int
    step: int
    model_type: str
    trainable_parameters: int
    context_length: int
    def __init__(self, base_model: _Optional[str] = ..., lora_rank: _Optional[int] = ..., lora_alpha: _Optional[float] = ..., tokenizer_id: _Optional[str] = ..., vocab_size: _Optional[int] = ..., step: _Optional[int] = ..., model_type: _Optional[str] = ..., trainable_parameters: _Optional[int] = ..., context_length: _Optional[int] = ...) -> None: ...

class Datum(_message.Message):
    __slots__ = ("tokens", "loss_weights", "target_tokens", "advantages", "sampling_logprobs", "extra_inputs")
    class ExtraInputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ...) -> None: ...
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOSS_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGES_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_INPUTS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    loss_weights: _containers.RepeatedScalarFieldContainer[float]
    target_tokens: _containers.RepeatedScalarFieldContainer[int]
    advantages: _containers.RepeatedScalarFieldContainer[float]
    sampling_logprobs: _containers.RepeatedScalarFieldContainer[float]
    extra_inputs: _containers.MessageMap[str, _common_pb2.Tensor]
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., loss_weights: _Optional[_Iterable[float]] = ..., target_tokens: _Optional[_Iterable[int]] = ..., advantages: _Optional[_Iterable[float]] = ..., sampling_logprobs: _Optional[_Iterable[float]] = ..., extra_inputs: _Optional[_Mapping[str, _common_pb2.Tensor]] = ...) -> None: ...

class DatumOutput(_message.Message):
    __slots__ = ("logprobs", "outputs")
    class OutputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ...) -> None: ...
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    outputs: _containers.MessageMap[str, _common_pb2.Tensor]
    def __init__(self, logprobs: _Optional[_Iterable[float]] = ..., outputs: _Optional[_Mapping[str, _common_pb2.Tensor]] = ...) -> None: ...

class ForwardBackwardRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "data", "loss_fn", "loss_config")
    class LossConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LOSS_FN_FIELD_NUMBER: _ClassVar[int]
    LOSS_CONFIG_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    data: _containers.RepeatedCompositeFieldContainer[Datum]
    loss_fn: str
    loss_config: _containers.ScalarMap[str, float]
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., data: _Optional[_Iterable[_Union[Datum, _Mapping]]] = ..., loss_fn: _Optional[str] = ..., loss_config: _Optional[_Mapping[str, float]] = ...) -> None: ...

class ForwardBackwardResponse(_message.Message):
    __slots__ = ("outputs", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedCompositeFieldContainer[DatumOutput]
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, outputs: _Optional[_Iterable[_Union[DatumOutput, _Mapping]]] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class ForwardRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "data", "loss_fn", "loss_config")
    class LossConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LOSS_FN_FIELD_NUMBER: _ClassVar[int]
    LOSS_CONFIG_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    data: _containers.RepeatedCompositeFieldContainer[Datum]
    loss_fn: str
    loss_config: _containers.ScalarMap[str, float]
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., data: _Optional[_Iterable[_Union[Datum, _Mapping]]] = ..., loss_fn: _Optional[str] = ..., loss_config: _Optional[_Mapping[str, float]] = ...) -> None: ...

class ForwardResponse(_message.Message):
    __slots__ = ("outputs", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedCompositeFieldContainer[DatumOutput]
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, outputs: _Optional[_Iterable[_Union[DatumOutput, _Mapping]]] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class AdamParams(_message.Message):
    __slots__ = ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    BETA1_FIELD_NUMBER: _ClassVar[int]
    BETA2_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    GRAD_CLIP_NORM_FIELD_NUMBER: _ClassVar[int]
    learning_rate: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    grad_clip_norm: float
    def __init__(self, learning_rate: _Optional[float] = ..., beta1: _Optional[float] = ..., beta2: _Optional[float] = ..., eps: _Optional[float] = ..., weight_decay: _Optional[float] = ..., grad_clip_norm: _Optional[float] = ...) -> None: ...

class OptimStepRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "adam")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ADAM_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    adam: AdamParams
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., adam: _Optional[_Union[AdamParams, _Mapping]] = ...) -> None: ...

class OptimStepResponse(_message.Message):
    __slots__ = ("step", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    step: int
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, step: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "max_tokens", "stop", "stop_token_ids", "seed")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    seed: int
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., seed: _Optional[int] = ...) -> None: ...

class SampleRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "prompts", "sampling_params", "num_samples", "sampler_path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_PARAMS_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    prompts: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenList]
    sampling_params: SamplingParams
    num_samples: int
    sampler_path: str
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., prompts: _Optional[_Iterable[_Union[_common_pb2.TokenList, _Mapping]]] = ..., sampling_params: _Optional[_Union[SamplingParams, _Mapping]] = ..., num_samples: _Optional[int] = ..., sampler_path: _Optional[str] = ...) -> None: ...

class SampledSequence(_message.Message):
    __slots__ = ("tokens", "logprobs", "stop_reason")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    stop_reason: StopReason
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ...) -> None: ...

class PromptSamples(_message.Message):
    __slots__ = ("samples",)
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[SampledSequence]
    def __init__(self, samples: _Optional[_Iterable[_Union[SampledSequence, _Mapping]]] = ...) -> None: ...

class SampleResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PromptSamples]
    def __init__(self, results: _Optional[_Iterable[_Union[PromptSamples, _Mapping]]] = ...) -> None: ...

class ComputeLogprobsRequest(_message.Message):
    __slots__ = ("session_id", "sequences")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    sequences: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenList]
    def __init__(self, session_id: _Optional[str] = ..., sequences: _Optional[_Iterable[_Union[_common_pb2.TokenList, _Mapping]]] = ...) -> None: ...

class Logprobs(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class ComputeLogprobsResponse(_message.Message):
    __slots__ = ("logprobs",)
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    logprobs: _containers.RepeatedCompositeFieldContainer[Logprobs]
    def __init__(self, logprobs: _Optional[_Iterable[_Union[Logprobs, _Mapping]]] = ...) -> None: ...

class SaveStateRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "name")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    name: str
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class SaveStateResponse(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class LoadStateRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "path", "with_optimizer")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    WITH_OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    path: str
    with_optimizer: bool
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., path: _Optional[str] = ..., with_optimizer: _Optional[bool] = ...) -> None: ...

class LoadStateResponse(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class SaveWeightsForSamplerRequest(_message.Message):
    __slots__ = ("session_id", "request_id", "name")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    request_id: str
    name: str
    def __init__(self, session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class SaveWeightsForSamplerResponse(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class GetWeightsRequest(_message.Message):
    __slots__ = ("session_id", "path", "trainable_only", "chunk_bytes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_ONLY_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    trainable_only: bool
    chunk_bytes: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., trainable_only: _Optional[bool] = ..., chunk_bytes: _Optional[int] = ...) -> None: ...

class CloseTrainingSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseTrainingSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
