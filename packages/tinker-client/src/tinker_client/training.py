"""Client of the scheduler's ``TrainingService``: write your own training loop (no torch).

The vocabulary is Tinker's::

    from tinker_client.training import AdamParams, Datum, SamplingParams, ServiceClient

    service = ServiceClient("localhost:50051", api_key=None)
    trainer = service.create_lora_training_client("tiny", rank=8, seed=0)
    tokenizer = trainer.get_tokenizer()

    prompt = tokenizer.encode("12+35=")
    samples = trainer.sample([prompt], SamplingParams(max_tokens=4), num_samples=8).result()
    data = [Datum.from_sequence(prompt + s.tokens, prompt_len=len(prompt),
                                advantage=adv, sampling_logprobs=s.logprobs) for s, adv in ...]
    fb = trainer.forward_backward(data, "importance_sampling").result()   # accumulates gradients
    trainer.optim_step(AdamParams(learning_rate=1e-3)).result()            # applies them

Every primitive comes in three forms:

* ``trainer.forward_backward(...)`` returns an :class:`APIFuture` at once (a
  ``concurrent.futures.Future``: ``.result()`` blocks, ``await future`` works too);
* ``await trainer.forward_backward_async(...)`` (asyncio) returns the same future once the request
  is queued (Tinker's style: ``await (await tc.forward_backward_async(...)).result_async()``);
* the request itself is sent by one background thread per training client, so a session's
  requests reach the server **in the order they were made**, and each carries a fresh
  ``request_id``: a retry after a lost connection or a timeout is applied once.

Inputs accept lists and numpy arrays. Message sizes are checked before sending against
``max_message_bytes`` (the scheduler's limit, 64 MiB by default); an oversized request fails with
an error that names the limit and says to split the data.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, Unpack

import numpy as np

from tinker_client.connection import (
    RETRY_CODES,
    ConnectionOptions,
    SchedulerConnection,
    call_with_retry,
)
from tinker_client.training_types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    OptimStepOutput,
    SampledSequence,
    SampleResult,
    SamplingParams,
    Tokenizer,
    int_list,
)
from tinker_core.proto import (
    MAX_MESSAGE_BYTES,
    common_pb2,
    message_size_options,
    tensors,
    training_pb2,
)
from tinker_core.proto import training_pb2_grpc as pb_grpc
from tinker_core.proto.model_info import ModelInfo

T = TypeVar("T")

#: gRPC codes a request is retried on (with the same request_id: the server applies it once).


class APIFuture(concurrent.futures.Future, Generic[T]):  # type: ignore[type-arg]
    """A ``concurrent.futures.Future`` that can also be awaited (``await fut`` / ``result_async``)."""

    def __await__(self) -> Any:
        return asyncio.wrap_future(self).__await__()

    async def result_async(self) -> T:
        return await asyncio.wrap_future(self)  # type: ignore[no-any-return]


class ServiceClient(SchedulerConnection):
    """A connection to a scheduler's TrainingService; creates training clients (sessions).

    ``address``, ``api_key``, ``tls`` and ``tls_ca`` as for :class:`SchedulerConnection`.
    """

    def __init__(
        self,
        address: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float | None = 600.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        retries: int = 5,
        **connection: Unpack[ConnectionOptions],
    ) -> None:
        self.max_message_bytes = int(max_message_bytes)
        super().__init__(address, api_key, options=message_size_options(self.max_message_bytes), **connection)
        self.timeout_s = timeout_s
        self.retries = retries
        self.stub = pb_grpc.TrainingServiceStub(self.channel)

    def call(self, method: str, request: Any, *, timeout_s: float | None = None) -> Any:
        """One unary RPC with size check and retries on UNAVAILABLE / DEADLINE_EXCEEDED."""
        size = request.ByteSize()
        if size > self.max_message_bytes:
            raise ValueError(
                f"{type(request).__name__} is {size} bytes, over max_message_bytes={self.max_message_bytes}; "
                "split the data into several calls (gradients accumulate until optim_step), or raise the "
                "limit on both the client (ServiceClient(max_message_bytes=...)) and the scheduler"
            )
        return call_with_retry(getattr(self.stub, method), request, attempts=self.retries + 1, codes=RETRY_CODES,
                               metadata=self.metadata, timeout=timeout_s or self.timeout_s)

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 8,
        *,
        alpha: float = 0.0,
        dropout: float = 0.0,
        target_modules: Sequence[str] = (),
        seed: int = 0,
        options: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> TrainingClient:
        """A new session training a rank-``rank`` LoRA adapter on ``base_model`` (shared host)."""
        if rank < 1:
            raise ValueError(f"rank must be >= 1 for LoRA (got {rank}); use create_training_client for full fine-tuning")
        return self._create(base_model, rank, alpha, dropout, target_modules, seed, options, request_id)

    def create_training_client(
        self, base_model: str, *, seed: int = 0, options: dict[str, Any] | None = None, request_id: str | None = None
    ) -> TrainingClient:
        """A new session that fine-tunes every weight of its own copy of ``base_model``."""
        return self._create(base_model, 0, 0.0, 0.0, (), seed, options, request_id)

    def _create(self, base_model: str, rank: int, alpha: float, dropout: float, targets: Sequence[str],
                seed: int, options: dict[str, Any] | None, request_id: str | None) -> TrainingClient:
        request = training_pb2.CreateTrainingSessionRequest(
            base_model=base_model, lora_rank=int(rank), lora_alpha=float(alpha), lora_dropout=float(dropout),
            lora_target_modules=list(targets), seed=int(seed), request_id=request_id or uuid.uuid4().hex,
            options_json=json.dumps(options) if options else "",
        )
        session = self.call("CreateSession", request)
        return TrainingClient(self, session.session_id, ModelInfo.from_proto(session.info))

    async def create_lora_training_client_async(self, base_model: str, rank: int = 8, **kwargs: Any) -> TrainingClient:
        return await asyncio.to_thread(self.create_lora_training_client, base_model, rank, **kwargs)


class TrainingClient:
    """One training session: forward_backward, optim_step, sample, save/load state.

    Requests are sent in call order by one background thread (see the module docstring).
    """

    def __init__(self, service: ServiceClient, session_id: str, info: ModelInfo) -> None:
        self.service = service
        self.session_id = session_id
        self.info = info
        self._sender = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"opentinker-{session_id}")
        self._tokenizer: Tokenizer | None = None
        self._closed = False

    def __enter__(self) -> TrainingClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _submit(self, method: str, request: Any, convert: Callable[[Any], T]) -> APIFuture[T]:
        future: APIFuture[T] = APIFuture()

        def send() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(convert(self.service.call(method, request)))
            except BaseException as e:  # noqa: BLE001 - delivered through the future
                future.set_exception(e)

        self._sender.submit(send)
        return future

    @staticmethod
    def _rid() -> str:
        return uuid.uuid4().hex

    # ---- training ---------------------------------------------------------------------------
    def forward_backward(
        self, data: Sequence[Datum], loss_fn: str = "cross_entropy", loss_fn_config: dict[str, float] | None = None
    ) -> APIFuture[ForwardBackwardOutput]:
        """Compute ``loss_fn`` (a registered loss name) summed over tokens and accumulate its
        gradients (until :meth:`optim_step`)."""
        request = training_pb2.ForwardBackwardRequest(
            session_id=self.session_id, request_id=self._rid(), data=[d.to_proto() for d in data],
            loss_fn=loss_fn, loss_config={k: float(v) for k, v in (loss_fn_config or {}).items()},
        )
        return self._submit("ForwardBackward", request, ForwardBackwardOutput.from_proto)

    def forward(
        self, data: Sequence[Datum], loss_fn: str = "", loss_fn_config: dict[str, float] | None = None
    ) -> APIFuture[ForwardBackwardOutput]:
        """Logprobs (and the loss, if ``loss_fn`` is given) without gradients."""
        request = training_pb2.ForwardRequest(
            session_id=self.session_id, request_id=self._rid(), data=[d.to_proto() for d in data],
            loss_fn=loss_fn, loss_config={k: float(v) for k, v in (loss_fn_config or {}).items()},
        )
        return self._submit("Forward", request, ForwardBackwardOutput.from_proto)

    def optim_step(self, adam_params: AdamParams | float) -> APIFuture[OptimStepOutput]:
        """Apply the accumulated gradients with Adam(W) (a float is the learning rate)."""
        adam = adam_params if isinstance(adam_params, AdamParams) else AdamParams(learning_rate=float(adam_params))
        request = training_pb2.OptimStepRequest(session_id=self.session_id, request_id=self._rid(), adam=adam.to_proto())
        return self._submit("OptimStep", request, lambda r: OptimStepOutput(int(r.step), dict(r.metrics)))

    # ---- sampling ---------------------------------------------------------------------------
    def sample(
        self, prompts: Sequence[Sequence[int] | np.ndarray], sampling_params: SamplingParams,
        num_samples: int = 1, *, sampler_path: str = "",
    ) -> APIFuture[list[list[SampledSequence]]]:
        """``num_samples`` completions of each prompt (token ids) from the current weights (or
        from ``sampler_path``); result ``[prompt][sample]``."""
        request = training_pb2.SampleRequest(
            session_id=self.session_id, request_id=self._rid(),
            prompts=[common_pb2.TokenList(tokens=int_list(p)) for p in prompts],
            sampling_params=sampling_params.to_proto(), num_samples=int(num_samples), sampler_path=sampler_path,
        )
        return self._submit("Sample", request, _samples)

    def compute_logprobs(self, sequences: Sequence[Sequence[int] | np.ndarray]) -> APIFuture[list[np.ndarray]]:
        """``log p(seq[t] | seq[:t])`` for ``t >= 1`` of each sequence under the current weights."""
        request = training_pb2.ComputeLogprobsRequest(
            session_id=self.session_id, sequences=[common_pb2.TokenList(tokens=int_list(s)) for s in sequences]
        )
        return self._submit("ComputeLogprobs", request,
                            lambda r: [np.asarray(x.values, dtype=np.float32) for x in r.logprobs])

    def sampling_client(self, sampler_path: str = "") -> SamplingClient:
        """A sampler of this session: current weights (``""``) or weights saved at ``sampler_path``."""
        return SamplingClient(self, sampler_path)

    def save_weights_and_get_sampling_client(self, name: str) -> SamplingClient:
        """Freeze the current weights under ``name`` and sample from them."""
        return SamplingClient(self, self.save_weights_for_sampler(name).result())

    # ---- state ------------------------------------------------------------------------------
    def save_state(self, name: str) -> APIFuture[str]:
        """Save weights, optimizer, RNG and step under ``name``; the result is the path."""
        request = training_pb2.SaveStateRequest(session_id=self.session_id, request_id=self._rid(), name=name)
        return self._submit("SaveState", request, lambda r: str(r.path))

    def load_state(self, path: str, *, with_optimizer: bool = True) -> APIFuture[int]:
        """Restore a state saved by :meth:`save_state`; the result is its step."""
        request = training_pb2.LoadStateRequest(
            session_id=self.session_id, request_id=self._rid(), path=path, with_optimizer=with_optimizer
        )
        return self._submit("LoadState", request, lambda r: int(r.step))

    def save_weights_for_sampler(self, name: str) -> APIFuture[str]:
        request = training_pb2.SaveWeightsForSamplerRequest(session_id=self.session_id, request_id=self._rid(), name=name)
        return self._submit("SaveWeightsForSampler", request, lambda r: str(r.path))

    def get_info(self) -> APIFuture[ModelInfo]:
        return self._submit("GetInfo", training_pb2.GetInfoRequest(session_id=self.session_id), ModelInfo.from_proto)

    def get_weights(self, path: str = "", *, trainable_only: bool = True) -> dict[str, np.ndarray]:
        """Download weights (this session's current trainable ones by default) as numpy arrays."""
        self._sender.submit(lambda: None).result()  # after every request made before this one
        stream = self.service.stub.GetWeights(
            training_pb2.GetWeightsRequest(session_id=self.session_id, path=path, trainable_only=trainable_only),
            metadata=self.service.metadata, timeout=self.service.timeout_s,
        )
        return tensors.join_tensor_chunks(stream)

    def get_tokenizer(self) -> Tokenizer:
        """The base model's tokenizer (downloaded once, loaded with the ``tokenizers`` library)."""
        if self._tokenizer is None:
            arrays = self.get_weights("tokenizer")
            self._tokenizer = Tokenizer({name: a.tobytes() for name, a in arrays.items()})
        return self._tokenizer

    def close(self) -> None:
        """End the session on the server (idempotent) and stop the sender thread."""
        if self._closed:
            return
        self._closed = True
        self._sender.submit(lambda: None).result()  # after every request made before
        try:
            self.service.call("CloseSession", training_pb2.CloseTrainingSessionRequest(session_id=self.session_id))
        finally:
            self._sender.shutdown(wait=False)

    # ---- asyncio forms ------------------------------------------------------------------------
    async def forward_backward_async(self, *args: Any, **kwargs: Any) -> APIFuture[ForwardBackwardOutput]:
        return self.forward_backward(*args, **kwargs)

    async def forward_async(self, *args: Any, **kwargs: Any) -> APIFuture[ForwardBackwardOutput]:
        return self.forward(*args, **kwargs)

    async def optim_step_async(self, *args: Any, **kwargs: Any) -> APIFuture[OptimStepOutput]:
        return self.optim_step(*args, **kwargs)

    async def sample_async(self, *args: Any, **kwargs: Any) -> APIFuture[list[list[SampledSequence]]]:
        return self.sample(*args, **kwargs)

    async def save_state_async(self, name: str) -> APIFuture[str]:
        return self.save_state(name)

    async def load_state_async(self, path: str, *, with_optimizer: bool = True) -> APIFuture[int]:
        return self.load_state(path, with_optimizer=with_optimizer)


class SamplingClient:
    """Samples from one training session's weights (current, or frozen at a saved path)."""

    def __init__(self, training: TrainingClient, sampler_path: str = "") -> None:
        self.training = training
        self.sampler_path = sampler_path

    def sample(self, prompt: Sequence[int] | np.ndarray, num_samples: int, sampling_params: SamplingParams) -> APIFuture[SampleResult]:
        """``num_samples`` completions of one prompt (Tinker's signature)."""
        inner = self.training.sample([prompt], sampling_params, num_samples, sampler_path=self.sampler_path)
        out: APIFuture[SampleResult] = APIFuture()

        def done(f: concurrent.futures.Future[Any]) -> None:
            if f.exception() is not None:
                out.set_exception(f.exception())  # type: ignore[arg-type]
            else:
                out.set_result(SampleResult(sequences=f.result()[0]))

        inner.add_done_callback(done)
        return out

    async def sample_async(self, prompt: Sequence[int] | np.ndarray, num_samples: int, sampling_params: SamplingParams) -> APIFuture[SampleResult]:
        return self.sample(prompt, num_samples, sampling_params)


def _samples(r: training_pb2.SampleResponse) -> list[list[SampledSequence]]:
    return [[SampledSequence.from_proto(s) for s in row.samples] for row in r.results]


__all__ = [
    "APIFuture", "AdamParams", "Datum", "ForwardBackwardOutput", "ModelInfo", "OptimStepOutput",
    "SampleResult", "SampledSequence", "SamplingClient", "SamplingParams", "ServiceClient", "Tokenizer",
    "TrainingClient",
]
