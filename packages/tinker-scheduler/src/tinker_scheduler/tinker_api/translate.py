"""Tinker requests onto the TrainingService sessions (:class:`~tinker_scheduler.sessions.SessionManager`).

Words: a *Tinker session* is the SDK's ``ServiceClient`` session (``create_session``, kept alive
by heartbeats; :mod:`.records`); a Tinker *model* (``create_model``) is one training session
(:class:`~tinker_scheduler.sessions.TrainingSession`), named by the id the SDK derives
(``<Tinker session>:train:<seq>``); a *sampling session* (:class:`SamplingSession`) is Tinker's
name for what a ``SamplingClient`` samples from. Checkpoints are named ``tinker://<model_id>/weights/<name>``
(a saved state), ``tinker://<model_id>/sampler_weights/<name>`` (sampler weights) and
``tinker://<model_id>/external_weights/<name>`` (a PEFT adapter to download, :mod:`.downloads`); they resolve
only through the caller's own models' records (:mod:`.records`, kept across restarts), so another
tenant's path is "not found". A *sampling session* samples from saved sampler weights on the
model host of the session that saved them.

The data alignment, loss names, Adam defaults and sampling defaults are those of
:mod:`tinker_algos.tinker_ops`, applied by the model hosts; this module only reshapes the JSON
and protobuf fields into the host operations (:mod:`tinker_scheduler.host_ops`).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinker_algos import tinker_ops
from tinker_scheduler import host_ops as ops
from tinker_scheduler.errors import StatusError
from tinker_scheduler.policy import Resources
from tinker_scheduler.sessions import SessionManager, SessionRequest, TrainingSession
from tinker_scheduler.tinker_api import downloads, fields, sampling
from tinker_scheduler.tinker_api.records import ModelRecord, Records
from tinker_scheduler.tinker_api.stability import StabilityRecords
from tinker_scheduler.training_service import NAME_RE
from tinker_scheduler.training_wire import MAX_LORA_RANK

#: Tinker ``loss_fn_inputs`` names -> the datum fields of :func:`tinker_algos.tinker_ops.datum_batch`.
LOSS_INPUTS = {"target_tokens": "target_tokens", "weights": "loss_weights", "advantages": "advantages",
               "logprobs": "sampling_logprobs", "sequence_ratio_mask": "sequence_ratio_mask"}
#: Checkpoint kinds in ``tinker://`` paths -> the session subdirectory holding them.
PATH_KINDS = {"weights": "states", "sampler_weights": "sampler", "external_weights": "external"}
#: The answer's ``type`` of each save, by kind.
SAVE_TYPES = {"weights": "save_weights", "sampler_weights": "save_weights_for_sampler",
              "external_weights": "save_weights_external"}
#: Why a model recorded in the store has no live session, by its state.
GONE = {"unloaded": "was unloaded",
        "expired": "expired: its client session sent no heartbeat for too long (tinker_session_timeout_s)",
        "restarted": "was lost when the scheduler restarted (its saved checkpoints remain: "
                     "create_training_client_from_state loads one into a new model)"}


@dataclass
class SamplingSession:
    """A Tinker sampling session: saved sampler weights of one of the tenant's models, or an
    untrained base model (sampled through a hidden training session on its host)."""

    tenant: str
    model_id: str  # "" for the base model
    sampler_path: str  # the sampler weights' file ("" for the base model)
    model_path: str  # their tinker:// path ("" for the base model)
    base_model: str = ""  # sampling the untrained base model: its name
    session_id: str = ""  # ... and the hidden session on its host that samples it
    client_session: str = ""  # the Tinker session that created it ("" when unknown)


class Models:
    """The Tinker models and sampling sessions of one gateway."""

    def __init__(self, sessions: SessionManager, records: Records, *, free: Callable[[], Resources] | None = None,
                 limits: tinker_ops.RequestLimits | None = None) -> None:
        self.sessions = sessions
        self.records = records
        self.free = free
        self.limits = limits or tinker_ops.RequestLimits()
        self.stability = StabilityRecords()
        self._sampling: dict[str, SamplingSession] = {}
        self._ids: dict[str, str] = {}  # Tinker model id -> session id
        self._lock = threading.Lock()

    # ---- models -------------------------------------------------------------------------------
    def create(self, tenant: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``create_model``: a LoRA training session named ``<Tinker session>:train:<model_seq_id>`` (the id
        the SDK derives itself)."""
        rank, seed, base_model = self.create_args(body)
        model_id = self._model_id(tenant, body)
        self._new_session(tenant, model_id, body, base_model, rank, seed)
        return {"model_id": model_id, "type": "create_model"}

    @staticmethod
    def create_args(body: Mapping[str, Any]) -> tuple[int, int, str]:
        """``(rank, seed, base_model)`` of a ``create_model`` body, its field types checked."""
        lora = fields.obj(body, "lora_config")
        fields.obj(body, "user_metadata")
        fields.whole(body.get("model_seq_id"), "model_seq_id", 0)
        return (fields.whole(lora.get("rank"), "lora_config.rank", 32), fields.whole(lora.get("seed"), "lora_config.seed", 0),
                fields.text(body.get("base_model"), "base_model"))

    def _model_id(self, tenant: str, body: Mapping[str, Any]) -> str:
        seq = fields.whole(body.get("model_seq_id"), "model_seq_id", 0)
        model_id = f"{fields.text(body.get('session_id'), 'session_id')}:train:{seq}"
        with self._lock:
            if model_id in self._ids or self.records.model(tenant, model_id) is not None:
                raise StatusError("ALREADY_EXISTS", f"model_seq_id: model {model_id!r} exists already")
        return model_id

    def _new_session(self, tenant: str, model_id: str, body: Mapping[str, Any], base_model: str, rank: int,
                     seed: int) -> None:
        if not 0 < rank <= MAX_LORA_RANK:
            raise StatusError("INVALID_ARGUMENT", f"lora_config.rank: must be in 1..{MAX_LORA_RANK} (got {rank}); "
                                                  "full fine-tuning is not served through the Tinker API yet")
        request = SessionRequest(base_model=base_model, lora_rank=rank, seed=seed)
        session = self.sessions.create(tenant, request, self.free() if self.free is not None else None)
        metadata = {str(k): str(v) for k, v in fields.obj(body, "user_metadata").items()}
        self.records.add_model(model_id, tenant, str(body.get("session_id", "")), session.id,
                               str(session.info.base_model or base_model), rank, session.dir, metadata)
        with self._lock:
            self._ids[model_id] = session.id

    def session(self, tenant: str, model_id: str) -> TrainingSession:
        """The tenant's live session of Tinker model ``model_id``; NOT_FOUND (saying why when the
        model was unloaded, expired or lost in a restart) otherwise, also for another tenant's."""
        with self._lock:
            session_id = self._ids.get(model_id, "")
        try:
            if session_id:
                return self.sessions.get(tenant, session_id)
        except StatusError as e:
            if e.code != "NOT_FOUND":
                raise
        record = self.records.model(tenant, model_id)
        if record is not None and record.state in GONE:
            raise StatusError("NOT_FOUND", f"model_id: model {model_id!r} {GONE[record.state]}")
        raise StatusError("NOT_FOUND", f"model_id: no model {model_id!r}; create one with create_lora_training_client")

    def record(self, tenant: str, model_id: str) -> ModelRecord:
        """The tenant's record of model ``model_id`` (live or not); NOT_FOUND for none or another tenant's."""
        record = self.records.model(tenant, model_id)
        if record is None:
            raise StatusError("NOT_FOUND", f"no model {model_id!r}")
        return record

    def info(self, tenant: str, model_id: str) -> dict[str, Any]:
        """``get_info``: from what the session's host said when the session joined it (the fields
        Tinker reports never change), so it never waits behind the host's queue of training calls."""
        info = self.session(tenant, model_id).info
        return {
            "type": "get_info", "model_id": model_id,
            "model_data": {"arch": info.model_type, "model_name": info.base_model, "tokenizer_id": info.tokenizer_id},
            "is_lora": bool(info.lora_rank), "lora_rank": info.lora_rank or None,
            "model_name": info.base_model,
        }

    def unload(self, tenant: str, model_id: str, state: str = "unloaded") -> dict[str, Any]:
        """Close the model's session; its record says ``state`` (``unloaded`` or ``expired``)."""
        self.sessions.close_session(self.session(tenant, model_id))
        with self._lock:
            self._ids.pop(model_id, None)
        self.records.set_model_state(model_id, state)
        return {"model_id": model_id, "type": "unload_model"}

    # ---- training -----------------------------------------------------------------------------
    def forward_backward(self, tenant: str, request: Mapping[str, Any]) -> tuple[list[list[float]], dict[str, float]]:
        """Run a decoded ``ForwardBackwardRequest`` (:func:`protowire.read_forward_backward`)."""
        session = self.session(tenant, request["model_id"])
        data = [_datum(d, i) for i, d in enumerate(request["data"])]
        loss_fn = request["loss_fn"]
        if loss_fn == "stable_reinforce":  # train against the sampler's recorded logprobs
            for i, (d, raw) in enumerate(zip(data, request["data"], strict=True)):
                self.stability.resolve(tenant, i, d, raw.get("loss_fn_input_spans", []))
        if not request["forward_only"] and not loss_fn:
            raise StatusError("INVALID_ARGUMENT", "loss_fn: is empty; name a loss such as 'cross_entropy'")
        try:
            tinker_ops.check_data([len(d["tokens"]) for d in data], session.info.context_length, self.limits)
        except ValueError as e:
            raise StatusError("INVALID_ARGUMENT", str(e)) from None
        op = ops.Forward if request["forward_only"] else ops.ForwardBackward
        host_request = op(data, loss_fn or "cross_entropy", dict(request["loss_fn_config"]))
        r = self.sessions.run(session, "", lambda call: call(host_request))
        return [list(map(float, lp)) for lp in r.logprobs], reduction_named(r.metrics)

    def optim_step(self, tenant: str, body: Mapping[str, Any]) -> dict[str, Any]:
        session = self.session(tenant, str(body.get("model_id", "")))
        adam = self.adam_args(body)
        r = self.sessions.run(session, "", lambda call: call(ops.OptimStep(adam)))
        return {"type": "optim_step", "metrics": {k: float(v) for k, v in r.metrics.items()}}

    @staticmethod
    def adam_args(body: Mapping[str, Any]) -> dict[str, float]:
        """The Adam parameters of an ``optim_step`` body, their types checked."""
        which = "adam_params" if body.get("adam_params") is not None else "optim_params"
        params = fields.obj(body, which)
        if body.get("optimizer_params") is not None:
            raise StatusError("INVALID_ARGUMENT", "optimizer_params: only Adam (adam_params) is supported")
        return {k: fields.number(params.get(k), f"{which}.{k}", 0.0)
                for k in ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")}

    # ---- checkpoints --------------------------------------------------------------------------
    @staticmethod
    def save_args(body: Mapping[str, Any], kind: str) -> tuple[str, float | None]:
        """``(name, expires_at)`` of a save request, its fields checked. Without a name
        (``save_weights_and_get_sampling_client``) the weights get a fresh one."""
        name = fields.text(body.get("path"), "path") or f"ephemeral-{uuid.uuid4().hex[:12]}"
        if not NAME_RE.fullmatch(name):
            raise StatusError("INVALID_ARGUMENT", f"path: {name!r} is not a valid name; use letters, digits, '.', '_' and '-'")
        expires_at = downloads.ttl_of(body.get("ttl_seconds"))
        if kind == "external_weights":
            downloads.age_recipients(body.get("age_encryption_recipients"))
        return name, expires_at

    def save(self, tenant: str, body: Mapping[str, Any], kind: str) -> dict[str, Any]:
        """``save_weights`` (kind ``weights``), ``save_weights_for_sampler`` (``sampler_weights``) or
        ``save_weights_external`` (``external_weights``: the sampler's files, a PEFT adapter, to
        download). Without a name the sampler weights' answer carries a new sampling session on them."""
        model_id = str(body.get("model_id", ""))
        session = self.session(tenant, model_id)
        name, expires_at = self.save_args(body, kind)
        target = str(session.dir / PATH_KINDS[kind] / name)
        save = ops.SaveState(target) if kind == "weights" else ops.SaveWeightsForSampler(target)
        self.sessions.run(session, "", lambda call: call(save))
        if kind == "external_weights" and body.get("age_encryption_recipients"):
            downloads.encrypt_export(Path(target), downloads.age_recipients(body["age_encryption_recipients"]))
        self.records.add_checkpoint(tenant, model_id, kind, name, target, expires_at)
        path = f"tinker://{model_id}/{kind}/{name}"
        out: dict[str, Any] = {"path": path, "type": SAVE_TYPES[kind]}
        if kind == "sampler_weights" and not body.get("path"):
            record = self.records.model(tenant, model_id)
            out["sampling_session_id"] = self.new_sampling_session(
                tenant, model_path=path, client_session=record.client_session if record is not None else "")
        if kind == "external_weights":
            saved = self.records.checkpoint(tenant, model_id, kind, name)
            out["size_bytes"] = saved.size_bytes if saved is not None else None
        return out

    def load(self, tenant: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``load_weights`` into a model, or (no ``model_id``: ``create_training_client_from_state``)
        into a new model of the checkpoint's base model and rank."""
        source = str(body.get("path", ""))
        path = self.resolve(tenant, source, "weights")
        model_id = str(body.get("model_id") or "")
        if not model_id:
            model_id = self._model_id(tenant, body)
            info = self.weights_info(tenant, source)
            self._new_session(tenant, model_id, body, str(info["base_model"]), int(info["lora_rank"] or 0), 0)
        session = self.session(tenant, model_id)
        with_optimizer = bool(body.get("optimizer"))
        self.sessions.run(session, "", lambda call: call(ops.LoadState(path, with_optimizer=with_optimizer)))
        return {"path": source, "model_id": model_id, "type": "load_weights"}

    def resolve(self, tenant: str, path: str, kind: str) -> str:
        """The file behind a ``tinker://`` path of the caller's own model (live or from before a
        restart); NOT_FOUND otherwise."""
        model_id, _, name = parse_path(path, kind)
        record = self.records.model(tenant, model_id)  # None for another tenant's model
        if record is None:
            raise StatusError("NOT_FOUND", f"path: no checkpoint {path!r}")
        return self.sessions.own_path(tenant, str(record.dir / PATH_KINDS[kind] / name), "path")

    # ---- sampling -----------------------------------------------------------------------------
    def new_sampling_session(self, tenant: str, *, model_path: str | None = None, base_model: str | None = None,
                             client_session: str = "") -> str:
        """A sampling session on saved sampler weights (``model_path``) or on the untrained
        ``base_model``: a hidden LoRA-less sampler session on the base model's host, one per
        tenant and base model (SessionManager's ``request_id`` makes repeats find it)."""
        sid = f"ss-{uuid.uuid4().hex[:12]}"
        model_path, base_model = fields.text(model_path, "model_path"), fields.text(base_model, "base_model")
        if model_path:
            sampler_path = self.resolve(tenant, model_path, "sampler_weights")
            target = SamplingSession(tenant, model_path[len("tinker://"):].split("/")[0], sampler_path, model_path)
        elif base_model and str(base_model).strip():
            name = str(base_model).strip()
            target = SamplingSession(tenant, "", "", "", base_model=name, session_id=self._base_sampler(tenant, name).id)
        else:
            raise StatusError("INVALID_ARGUMENT", "model_path or base_model: pass one (a tinker://.../sampler_weights/... "
                                                  "path, or the name of a base model to sample untrained)")
        target.client_session = client_session
        with self._lock:
            self._sampling[sid] = target
        return sid

    def samplers_of(self, tenant: str, client_session: str) -> list[str]:
        """The ids of the sampling sessions the tenant's Tinker session created (kept in memory:
        a restart forgets them)."""
        with self._lock:
            return sorted(sid for sid, s in self._sampling.items()
                          if s.tenant == tenant and s.client_session == client_session)

    def _base_sampler(self, tenant: str, base_model: str) -> TrainingSession:
        """The tenant's hidden sampler session on ``base_model`` (created on first use)."""
        request = SessionRequest(base_model=base_model, lora_rank=1, request_id=f"tinker-base-sampler:{base_model}")
        return self.sessions.create(tenant, request, self.free() if self.free is not None else None)

    def _sampling_session(self, tenant: str, target: SamplingSession) -> TrainingSession:
        """Where a sampling session samples: its hidden base sampler, else the live session of the
        model that saved the weights, else (that model unloaded, expired or lost in a restart) the
        hidden base sampler of its base model, which loads the saved adapter as well."""
        if target.session_id:
            return self.sessions.get(tenant, target.session_id)
        try:
            return self.session(tenant, target.model_id)
        except StatusError as e:
            record = self.records.model(tenant, target.model_id)
            if e.code != "NOT_FOUND" or record is None:
                raise
            return self._base_sampler(tenant, record.base_model)

    def sampler_info(self, tenant: str, sampler_id: str) -> dict[str, Any]:
        s = self.sampling_model(tenant, {"sampling_session_id": sampler_id})
        session = self._sampling_session(tenant, s)
        return {"sampler_id": sampler_id, "base_model": session.info.base_model, "model_path": s.model_path or None}

    def weights_info(self, tenant: str, path: str) -> dict[str, Any]:
        model_id, kind, _ = parse_path(path)
        self.resolve(tenant, path, kind)
        record = self.record(tenant, model_id)
        return {"base_model": record.base_model, "is_lora": record.lora_rank > 0, "lora_rank": record.lora_rank or None}

    def sampling_model(self, tenant: str, body: Mapping[str, Any]) -> SamplingSession:
        """The sampling session a request names; a ``SampleRequest``'s fields are checked here,
        before any work is queued."""
        if body.get("prompt") is not None:
            prompt, _, _ = sampling.sample_args(body)
            sampling.LogprobRequest.of(body, len(prompt))
        sid = fields.text(body.get("sampling_session_id"), "sampling_session_id")
        if not sid and (body.get("model_path") or body.get("base_model")):
            sid = self.new_sampling_session(tenant, model_path=body.get("model_path"), base_model=body.get("base_model"))
        with self._lock:
            s = self._sampling.get(str(sid or ""))
        if s is None or s.tenant != tenant:
            raise StatusError("NOT_FOUND", f"sampling_session_id: no sampling session {sid!r}")
        return s

    def sample(self, tenant: str, body: Mapping[str, Any], target: SamplingSession,
               request_id: Callable[[], str] | None = None) -> dict[str, Any]:
        """A ``SampleRequest``: the samples, then (when asked) one ``score`` call for prompt logprobs
        and top-k logprobs; the answer :func:`.protowire.sample_response` writes. With
        ``record_stability_info`` the samples are recorded (:mod:`.stability`) under the ids of
        ``request_id()``'s request."""
        session = self._sampling_session(tenant, target)
        prompt, params, n = sampling.sample_args(body)
        wants = sampling.LogprobRequest.of(body, len(prompt))
        vocab = session.info.vocab_size
        bad = next((t for t in prompt if not 0 <= t < vocab), None) if vocab else None
        if bad is not None:
            raise StatusError("INVALID_ARGUMENT", f"prompt: token id {bad} is outside the model's vocabulary [0, {vocab})")
        try:
            tinker_ops.check_sample([len(prompt)], params["max_tokens"], n, session.info.context_length, self.limits)
        except ValueError as e:
            raise StatusError("INVALID_ARGUMENT", str(e)) from None
        base = bool(target.base_model)
        sample = ops.Sample([prompt], params, n, sampler_path=target.sampler_path, base=base)
        samples = list(self.sessions.run(session, "", lambda call: call(sample))[0])
        if body.get("record_stability_info") and request_id is not None:
            self.stability.record(tenant, request_id(), prompt, samples)
        scores: list[dict[str, np.ndarray]] = []
        if wants.wanted:
            score = ops.Score(wants.sequences(prompt, samples), max(wants.topk_prompt, wants.topk_sample),
                              sampler_path=target.sampler_path, base=base)
            scores = self.sessions.run(session, "", lambda call: call(score))
        return sampling.answer(wants, prompt, samples, scores)


def parse_path(path: str, kind: str = "") -> tuple[str, str, str]:
    """``(model_id, kind, name)`` of ``tinker://<model_id>/<kind>/<name>`` (of ``kind`` if given)."""
    parts = path[len("tinker://"):].split("/") if isinstance(path, str) and path.startswith("tinker://") else []
    if len(parts) != 3 or parts[1] not in PATH_KINDS or (kind and parts[1] != kind) or not NAME_RE.fullmatch(parts[2]):
        shape = f"tinker://<model_id>/{kind or '|'.join(PATH_KINDS)}/<name>"
        raise StatusError("INVALID_ARGUMENT", f"path: {path!r} is not a {shape} path")
    return parts[0], parts[1], parts[2]


def reduction_named(metrics: Mapping[str, float]) -> dict[str, float]:
    """Metrics named ``name:reduction`` as the SDK combines them across chunks: ``loss`` is left
    out (it is ``loss:sum``), ``num_tokens`` sums, a loss's own metrics average."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if ":" in key:
            out[key] = float(value)
        elif key != "loss":
            out[f"{key}:{'sum' if key == 'num_tokens' else 'mean'}"] = float(value)
    return out


def _datum(d: Mapping[str, Any], i: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"tokens": list(d["tokens"])}
    for name, array in d["loss_fn_inputs"].items():
        if name not in LOSS_INPUTS:
            raise StatusError("INVALID_ARGUMENT", f"data[{i}].loss_fn_inputs.{name}: unknown; known: {sorted(LOSS_INPUTS)}")
        out[LOSS_INPUTS[name]] = np.asarray(array).reshape(-1).tolist()
    if "target_tokens" not in out:
        raise StatusError("INVALID_ARGUMENT", f"data[{i}].loss_fn_inputs.target_tokens: is missing")
    return out
