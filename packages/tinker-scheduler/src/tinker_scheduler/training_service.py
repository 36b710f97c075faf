"""``opentinker.v1.TrainingService``: Tinker-style training sessions served by the scheduler.

The scheduler's gRPC server serves this service next to ``JobService`` (same port, same API keys
and tenants, see :mod:`tinker_scheduler.auth`). A *session* is one trainable model: a LoRA adapter
on a shared base model, or (``lora_rank == 0``) a full copy. Sessions live on model hosts
(:class:`tinker_scheduler.model_host.ModelHost`, Ray actors, kept by
:class:`tinker_scheduler.host_pool.HostPool`): all LoRA sessions of one base model (same id,
precision and device) share one host; a full fine-tuning session gets its own.

Guarantees (kept by :class:`tinker_scheduler.sessions.SessionManager`):

* **Tenants**: a session belongs to the tenant that created it; any other tenant gets
  ``NOT_FOUND``, exactly as for an id that does not exist. Saved states live under
  ``RUNS_DIR/<tenant>/sessions/<session id>/`` and ``LoadState`` only reads the caller's own.
* **Order**: requests of one session run one at a time, in arrival order (the client SDK sends
  a session's requests in submission order); sessions on one host are served round-robin.
* **Idempotence**: a request carrying a ``request_id`` already seen in the session with the same
  method and arguments returns the first answer (or waits for it while it is still running); it
  is never applied twice. The same ``request_id`` with another method or other arguments is
  ``INVALID_ARGUMENT``. The last :data:`~tinker_scheduler.sessions.REQUEST_CACHE_SIZE` answers
  per session are kept.
* **Limits before work**: every datum, sequence and prompt plus ``max_tokens`` fits the model's
  context length, and a request stays within :attr:`TrainingService.limits`
  (:class:`tinker_algos.tinker_ops.RequestLimits`); else ``INVALID_ARGUMENT`` naming the limit,
  before anything is queued on the host.
* **Deadlines**: a request still waiting when its client's deadline passes, or whose client
  cancels it, is dropped unrun (it does not hold the host); one that has started runs to its end.
* **Idle sessions**: a session unused for ``session_idle_timeout_s`` is checkpointed (weights,
  optimizer, RNG, step) and released from its host; its next request restores it transparently.
  Gradients accumulated but not applied by ``OptimStep`` are not kept across a release.
  A host without sessions for ``host_idle_timeout_s`` shuts down.
* **No pickles on the wire** (:mod:`tinker_scheduler.training_wire`). Message sizes are capped
  by ``max_message_bytes`` (both ways).

Sessions are held in memory: they end with the scheduler process (their saved states remain).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc
import numpy as np
from google.protobuf.message import Message

from tinker_algos import tinker_ops
from tinker_core.proto import common_pb2, request_key, tensors, training_pb2, training_pb2_grpc
from tinker_scheduler import host_ops as ops
from tinker_scheduler import training_wire as wire
from tinker_scheduler.auth import AuthMode
from tinker_scheduler.errors import StatusError, classify, grpc_status
from tinker_scheduler.policy import Resources
from tinker_scheduler.rpc import abort, caller_tenant
from tinker_scheduler.sessions import Caller, HostCall, SessionManager, TrainingSession
from tinker_scheduler.store import JobStore

R = TypeVar("R")

#: Names of saved states and sampler weights.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class TrainingService(training_pb2_grpc.TrainingServiceServicer):
    """The TrainingService handlers over ``sessions`` (see the module docstring).

    ``free`` returns what the cluster has free (a new model host must fit in it); None: no check.
    ``limits`` bound each request (checked before it is queued).
    """

    def __init__(
        self, sessions: SessionManager, *, store: JobStore, auth: AuthMode, free: Callable[[], Resources] | None = None,
        limits: tinker_ops.RequestLimits | None = None,
    ) -> None:
        self.sessions = sessions
        self.store = store
        self.auth = auth
        self._free = free
        self.limits = limits or tinker_ops.RequestLimits()

    def _guarded(self, context: grpc.ServicerContext, fn: Callable[[str], R]) -> R:
        tenant = caller_tenant(self.store, self.auth, context)
        try:
            return fn(tenant)
        except Exception as e:  # noqa: BLE001 - e.g. a base model a local host cannot load: a status, never UNKNOWN
            code, message = classify(e)
            abort(context, grpc_status(code), message)

    def _session_call(self, context: grpc.ServicerContext, method: str, request: Message,
                      fn: Callable[[TrainingSession, HostCall], R], check: Callable[[TrainingSession], None] | None = None) -> R:
        """Run ``fn(session, call)`` for the request's session: ``check(session)`` first (limits;
        a ValueError is INVALID_ARGUMENT), once per ``request_id`` (with the request's key)."""
        caller = _caller(context)
        ended = False
        context.add_callback(lambda: None if ended else caller.cancel())  # the client went away

        def go(tenant: str) -> R:
            session = self.sessions.get(tenant, request.session_id)
            if check is not None:
                try:
                    check(session)
                except ValueError as e:
                    raise StatusError("INVALID_ARGUMENT", str(e)) from None
            request_id = getattr(request, "request_id", "")
            key = request_key(method, request) if request_id else ""
            return self.sessions.run(session, request_id, lambda call: fn(session, call), key=key, caller=caller)

        try:
            return self._guarded(context, go)
        finally:
            ended = True

    def _check_data(self, request: training_pb2.ForwardRequest | training_pb2.ForwardBackwardRequest) -> Callable[[TrainingSession], None]:
        return lambda s: tinker_ops.check_data([len(d.tokens) for d in request.data], s.info.context_length, self.limits)

    # ---- RPCs -------------------------------------------------------------------------------
    def CreateSession(self, request: training_pb2.CreateTrainingSessionRequest, context: grpc.ServicerContext) -> training_pb2.TrainingSession:
        def go(tenant: str) -> training_pb2.TrainingSession:
            free = self._free() if self._free is not None else None
            session = self.sessions.create(tenant, wire.session_request(request), free)
            return training_pb2.TrainingSession(session_id=session.id, info=session.info.to_proto())

        return self._guarded(context, go)

    def GetInfo(self, request: training_pb2.GetInfoRequest, context: grpc.ServicerContext) -> training_pb2.ModelInfo:
        info = self._session_call(context, "GetInfo", request, lambda s, call: call(ops.Info()))
        return info.to_proto()

    def ForwardBackward(self, request: training_pb2.ForwardBackwardRequest, context: grpc.ServicerContext) -> training_pb2.ForwardBackwardResponse:
        def fn(s: TrainingSession, call: HostCall) -> training_pb2.ForwardBackwardResponse:
            if not request.loss_fn:
                raise StatusError("INVALID_ARGUMENT", "loss_fn: is empty; name a loss such as 'cross_entropy'")
            r = call(ops.ForwardBackward(wire.data(request), request.loss_fn, dict(request.loss_config)))
            return training_pb2.ForwardBackwardResponse(outputs=wire.datum_outputs(r), metrics=r.metrics)

        return self._session_call(context, "ForwardBackward", request, fn, self._check_data(request))

    def Forward(self, request: training_pb2.ForwardRequest, context: grpc.ServicerContext) -> training_pb2.ForwardResponse:
        def fn(s: TrainingSession, call: HostCall) -> training_pb2.ForwardResponse:
            r = call(ops.Forward(wire.data(request), request.loss_fn, dict(request.loss_config)))
            return training_pb2.ForwardResponse(outputs=wire.datum_outputs(r), metrics=r.metrics)

        return self._session_call(context, "Forward", request, fn, self._check_data(request))

    def OptimStep(self, request: training_pb2.OptimStepRequest, context: grpc.ServicerContext) -> training_pb2.OptimStepResponse:
        def fn(s: TrainingSession, call: HostCall) -> training_pb2.OptimStepResponse:
            r = call(ops.OptimStep(wire.adam_fields(request.adam)))
            return training_pb2.OptimStepResponse(step=r.step, metrics=r.metrics)

        return self._session_call(context, "OptimStep", request, fn)

    def Sample(self, request: training_pb2.SampleRequest, context: grpc.ServicerContext) -> training_pb2.SampleResponse:
        def check(s: TrainingSession) -> None:
            tinker_ops.check_sample([len(p.tokens) for p in request.prompts], request.sampling_params.max_tokens,
                                    request.num_samples or 1, s.info.context_length, self.limits)
            vocab = s.info.vocab_size
            for i, p in enumerate(request.prompts):
                bad = [t for t in p.tokens if not 0 <= t < vocab] if vocab else []
                if bad:
                    raise ValueError(f"prompts[{i}]: token id {bad[0]} is outside the model's vocabulary [0, {vocab})")

        def fn(s: TrainingSession, call: HostCall) -> training_pb2.SampleResponse:
            path = self.sessions.own_path(s.tenant, request.sampler_path, "sampler_path") if request.sampler_path else ""
            rows = call(ops.Sample([list(p.tokens) for p in request.prompts], wire.sampling_fields(request.sampling_params),
                                   request.num_samples or 1, sampler_path=path))
            return wire.sample_response(rows)

        return self._session_call(context, "Sample", request, fn, check)

    def ComputeLogprobs(self, request: training_pb2.ComputeLogprobsRequest, context: grpc.ServicerContext) -> training_pb2.ComputeLogprobsResponse:
        def check(s: TrainingSession) -> None:
            tinker_ops.check_sequences([len(x.tokens) for x in request.sequences], s.info.context_length, self.limits)

        def fn(s: TrainingSession, call: HostCall) -> training_pb2.ComputeLogprobsResponse:
            rows = call(ops.ComputeLogprobs([list(x.tokens) for x in request.sequences]))
            return training_pb2.ComputeLogprobsResponse(logprobs=[training_pb2.Logprobs(values=r) for r in rows])

        return self._session_call(context, "ComputeLogprobs", request, fn, check)

    @staticmethod
    def _named_path(s: TrainingSession, kind: str, name: str) -> str:
        if not NAME_RE.fullmatch(name or ""):
            raise StatusError("INVALID_ARGUMENT", f"name: {name!r} is not a valid name; use letters, digits, '.', '_' and '-' (e.g. 'step-000100')")
        return str(s.dir / kind / name)

    def SaveState(self, request: training_pb2.SaveStateRequest, context: grpc.ServicerContext) -> training_pb2.SaveStateResponse:
        def fn(s: TrainingSession, call: HostCall) -> training_pb2.SaveStateResponse:
            r = call(ops.SaveState(self._named_path(s, "states", request.name)))
            return training_pb2.SaveStateResponse(path=r.path)

        return self._session_call(context, "SaveState", request, fn)

    def LoadState(self, request: training_pb2.LoadStateRequest, context: grpc.ServicerContext) -> training_pb2.LoadStateResponse:
        def fn(s: TrainingSession, call: HostCall) -> training_pb2.LoadStateResponse:
            path = self.sessions.own_path(s.tenant, request.path, "path")
            r = call(ops.LoadState(path, with_optimizer=request.with_optimizer))
            return training_pb2.LoadStateResponse(step=r.step)

        return self._session_call(context, "LoadState", request, fn)

    def SaveWeightsForSampler(self, request: training_pb2.SaveWeightsForSamplerRequest, context: grpc.ServicerContext) -> training_pb2.SaveWeightsForSamplerResponse:
        def fn(s: TrainingSession, call: HostCall) -> training_pb2.SaveWeightsForSamplerResponse:
            r = call(ops.SaveWeightsForSampler(self._named_path(s, "sampler", request.name)))
            return training_pb2.SaveWeightsForSamplerResponse(path=r.path)

        return self._session_call(context, "SaveWeightsForSampler", request, fn)

    def GetWeights(self, request: training_pb2.GetWeightsRequest, context: grpc.ServicerContext) -> Iterator[common_pb2.TensorChunk]:
        def fn(s: TrainingSession, call: HostCall) -> dict[str, np.ndarray]:
            path = request.path
            if path and path != "tokenizer":
                path = self.sessions.own_path(s.tenant, path, "path")
            return call(ops.GetWeights(path, trainable_only=request.trainable_only))

        arrays = self._session_call(context, "GetWeights", request, fn)
        chunk = int(request.chunk_bytes) or tensors.DEFAULT_CHUNK_BYTES
        for name in sorted(arrays):
            yield from tensors.iter_tensor_chunks(name, arrays[name], chunk)

    def CloseSession(self, request: training_pb2.CloseTrainingSessionRequest, context: grpc.ServicerContext) -> training_pb2.CloseTrainingSessionResponse:
        def go(tenant: str) -> training_pb2.CloseTrainingSessionResponse:
            try:
                session = self.sessions.get(tenant, request.session_id)
            except StatusError as e:
                if e.code == "NOT_FOUND":  # idempotent: closing a closed session is fine
                    return training_pb2.CloseTrainingSessionResponse()
                raise
            self.sessions.close_session(session)
            return training_pb2.CloseTrainingSessionResponse()

        return self._guarded(context, go)


def _caller(context: grpc.ServicerContext) -> Caller:
    """The client of a call: its deadline (none when it set none)."""
    remaining = context.time_remaining()
    no_deadline = remaining is None or remaining > 1e9  # gRPC reports "no deadline" as a huge remainder
    return Caller(deadline=None if no_deadline else time.time() + remaining)
