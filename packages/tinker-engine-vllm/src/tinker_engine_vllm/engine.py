"""The ``vllm`` rollout engine: a job's episodes sampled on a vLLM server, over HTTP.

Routes it uses: ``GET /v1/models`` (the base model and the adapters held), ``POST
/v1/completions`` (token-id prompts, ``logprobs``, ``return_tokens_as_token_ids``; ``echo`` to
score the probe batch), ``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` (the server
runs with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``), ``POST /pause?mode=``
and ``/resume``.

Weights arrive as LoRA adapters, one name per version: ``<job>-v<version>``
(:func:`tinker_core.engines.adapter_name`). A name is never loaded twice (a same-name reload serves
stale prefix-cache blocks, vllm#42125). The previous version is unloaded once no request in flight
names it. After each load, :meth:`VLLMEngine.finish_weight_update` checks what the server holds:

1. it lists the new adapter (``GET /v1/models``);
2. the adapter's files still hash to the learner's manifest (:func:`tinker_core.engines.tree_sha256`,
   the learner wrote them; an adapter rewritten or re-read in place, SkyRL#1606, differs);
3. its logprobs of the learner's probe batch agree with the learner's within
   ``probe_tolerance`` (:func:`tinker_core.engines.verify_sync`, the distributed job's sync check);
   and, whatever the tolerance, a probe that repeats exactly (to 1e-6 nats per token) what the
   server answered before while the learner's moved (by 1e-3 or more) is named for the pitfall it
   shows: the previous version's logprobs (stale weights or a stale prefix cache), or the base
   model's, measured before the first load (an adapter that loaded with 200 OK and changes nothing,
   vllm#34186).

After :meth:`VLLMEngine.resume` it checks the adapter is still held (sleep or pause releasing LoRA
buffers, verl#7434). Each failure raises :class:`~tinker_core.engines.WeightSyncError`, which fails
the job before it trains on samples of the wrong weights.

Logprobs: the server reports the model's raw logprobs (vLLM's default ``--logprobs-mode
raw_logprobs``): they are ``raw_logprobs``; ``logprobs`` (the sampled distribution's) are the same
values, except 0 for greedy samples. Full-weight updates (vLLM's NCCL weight transfer) are not
supported: a job that uses this engine trains a LoRA adapter.
"""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tinker_core.engines import (
    EngineContext,
    EngineError,
    EngineHealth,
    EngineUnavailableError,
    Generation,
    PauseMode,
    SamplingParamsLike,
    WeightSyncError,
    WeightUpdate,
    adapter_name,
    check_pause_mode,
    probe_gap,
    tree_sha256,
    verify_sync,
)
from tinker_core.import_policy import policy_enforced

__all__ = ["VLLMEngine", "VLLMOptions"]

START_HINT = (
    "start one with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve MODEL --enable-lora --max-lora-rank R` "
    "(pip install vllm on a GPU machine) and point rollout.engine_options.url at it"
)
SAME = 1e-6  # nats per token: two probes this close come from the same weights
MOVED = 1e-3  # nats per token: the learner's probe moved at least this much since the last version


class VLLMOptions(BaseModel):
    """``rollout.engine_options`` of a job whose ``rollout.engine`` is ``vllm``."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field("http://127.0.0.1:8000", description="The vLLM server's base URL.")
    model: str | None = Field(None, description="The served base model's name; None: the one the server lists.")
    timeout_s: float = Field(300.0, gt=0, description="Seconds one HTTP call may take.")
    probe_tolerance: float = Field(0.05, ge=0, description="Mean absolute probe logprob gap (nats per token) allowed after a sync.")


ALLOWED_URLS_ENV = "OPENTINKER_VLLM_URLS"
"""The vLLM servers a scheduler's jobs may use (comma-separated base URLs), set by its operator."""


def check_url(url: str) -> None:
    """Refuse ``url`` in a scheduler's job unless the operator listed it in
    :data:`ALLOWED_URLS_ENV`: a tenant's config must not make the scheduler's hosts send requests
    (and adapter paths) to an address of the tenant's choosing. ``opentinker train`` on the
    user's own machine (no scheduler policy enforced) uses any URL."""
    if not policy_enforced():
        return
    allowed = {u.strip().rstrip("/") for u in os.environ.get(ALLOWED_URLS_ENV, "").split(",") if u.strip()}
    if url.rstrip("/") not in allowed:
        raise EngineError(
            f"rollout.engine_options.url: {url!r} is not a vLLM server this scheduler's operator allows; "
            f"the operator lists them in {ALLOWED_URLS_ENV} (comma-separated) where the scheduler runs"
            + (f" (allowed: {', '.join(sorted(allowed))})" if allowed else " (none is listed)")
        )


class VLLMEngine:
    """A vLLM server as a rollout engine (see the module docstring)."""

    name = "vllm"

    def __init__(self, options: VLLMOptions, *, job_name: str = "job", transport: httpx.BaseTransport | None = None) -> None:
        check_url(options.url)
        self.options = options
        self.url = options.url.rstrip("/")
        self.job = re.sub(r"[^A-Za-z0-9_-]+", "-", job_name).strip("-") or "job"
        self.http = httpx.Client(base_url=self.url, timeout=options.timeout_s, transport=transport)
        self.base: str | None = options.model
        self.version: int | None = None
        self.current: str | None = None  # the adapter sampled with
        self._updating: int | None = None
        self._pending: WeightUpdate | None = None
        self._cond = threading.Condition()
        self._paused: str | None = None
        self._in_flight: Counter[str] = Counter()
        self._retiring: list[str] = []
        self._seen: set[tuple[int, ...]] = set()  # probe rows this engine had the server score
        self._seen_before: set[tuple[int, ...]] = set()  # ... before the update being checked
        self._base_rows: dict[tuple[int, ...], list[float]] = {}  # the base model's logprobs of probe rows
        self._server_rows: dict[str, dict[tuple[int, ...], list[float]]] = {}  # per adapter: the server's
        self._learner_rows: dict[str, dict[tuple[int, ...], list[float]]] = {}  # per adapter: the learner's

    @classmethod
    def from_context(cls, context: EngineContext) -> VLLMEngine:
        try:
            options = VLLMOptions.model_validate(context.options)
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise EngineError(
                f"rollout.engine_options.{field}: {first['msg']}; the vllm engine takes {', '.join(VLLMOptions.model_fields)}"
            ) from None
        return cls(options, job_name=getattr(context.job, "name", None) or "job")

    # ---- HTTP ---------------------------------------------------------------------------------
    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise EngineUnavailableError(f"no vLLM server answers at {self.url} ({type(e).__name__}: {e}); {START_HINT}") from None
        if r.status_code >= 400:
            raise EngineError(f"vLLM server {self.url}: {method} {path} answered {r.status_code}: {r.text[:300]}")
        return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None

    def models(self) -> list[dict[str, Any]]:
        """What ``GET /v1/models`` lists: the base model and the adapters (``parent`` set)."""
        return list(self._call("GET", "/v1/models").get("data", []))

    def adapters(self) -> list[str]:
        return [m["id"] for m in self.models() if m.get("parent")]

    def _base(self) -> str:
        if self.base is None:
            bases = [m["id"] for m in self.models() if not m.get("parent")]
            if not bases:
                raise EngineUnavailableError(f"the vLLM server at {self.url} lists no base model; {START_HINT}")
            self.base = bases[0]
        return self.base

    # ---- generation ---------------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParamsLike, *, adapter: str | None = None, **hints: Any
    ) -> list[list[Generation]]:
        """Sample with the newest version held (``adapter``, an in-process name, is not used: the
        server holds the job's adapter as ``<job>-v<version>``)."""
        with self._cond:
            self._cond.wait_for(lambda: self._paused is None)
            model = self.current or self._base()
            self._in_flight[model] += 1
            version = self.version
        try:
            body = self._completion_body(model, prompts, params)
            try:
                data = self._call("POST", "/v1/completions", json=body)
            except EngineError as e:
                if self.current is not None and model == self.current and " 404" in str(e):
                    raise self._dropped("a request") from None
                raise
        finally:
            with self._cond:
                self._in_flight[model] -= 1
                self._cond.notify_all()
            self._retire_idle()
        return self._generations(data, prompts, params, version)

    @staticmethod
    def _completion_body(model: str, prompts: Sequence[Sequence[int]], params: SamplingParamsLike) -> dict[str, Any]:
        stop_ids = [int(t) for t in params.stop_token_ids]
        if params.stop_at_eos:
            stop_ids += [int(t) for t in params.eos_token_ids]
        body: dict[str, Any] = {
            "model": model, "prompt": [[int(t) for t in p] for p in prompts], "max_tokens": params.max_new_tokens,
            "n": params.n, "temperature": params.temperature, "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1, "logprobs": 0, "return_tokens_as_token_ids": True,
            "ignore_eos": not params.stop_at_eos, "stop": list(params.stop), "stop_token_ids": stop_ids,
            "include_stop_str_in_output": True, "skip_special_tokens": True,
        }
        if params.seed is not None:
            body["seed"] = int(params.seed)
        return body

    def _generations(self, data: Any, prompts: Sequence[Sequence[int]], params: SamplingParamsLike, version: int | None) -> list[list[Generation]]:
        out: list[list[Generation]] = [[] for _ in prompts]
        eos = {int(t) for t in params.eos_token_ids}
        for choice in sorted(data["choices"], key=lambda c: c["index"]):
            pi, si = divmod(int(choice["index"]), params.n)
            lp = choice.get("logprobs") or {}
            tokens = [int(str(t).rsplit(":", 1)[1]) for t in lp.get("tokens") or []]
            raw = [float(x) for x in lp.get("token_logprobs") or []]
            sampled = [0.0] * len(raw) if params.temperature == 0 else list(raw)
            out[pi].append(Generation(
                prompt_tokens=[int(t) for t in prompts[pi]], tokens=tokens, logprobs=sampled, raw_logprobs=raw,
                stop_reason=_stop_reason(choice.get("finish_reason"), choice.get("stop_reason"), eos),
                text=choice.get("text") or "", prompt_index=pi, sample_index=si, weight_version=version,
            ))
        return out

    def _score(self, model: str, rows: Sequence[Sequence[int]]) -> list[list[float]]:
        """The server's logprobs of each row's tokens (``echo``), 0 at the first position."""
        data = self._call("POST", "/v1/completions", json={
            "model": model, "prompt": [list(r) for r in rows], "max_tokens": 1, "echo": True, "logprobs": 0,
            "temperature": 0.0, "return_tokens_as_token_ids": True,
        })
        scores = []
        for choice, row in zip(sorted(data["choices"], key=lambda c: c["index"]), rows, strict=True):
            lps = (choice.get("logprobs") or {}).get("token_logprobs") or []
            scores.append([0.0 if x is None else float(x) for x in lps[: len(row)]])
        return scores

    # ---- weights ------------------------------------------------------------------------------
    def init_weight_transfer(self) -> None:
        """Find the base model (adapters need no transfer engine: they load from a path)."""
        self._base()

    def start_weight_update(self, version: int) -> None:
        """Begin the update to ``version``; the adapter held so far must still be on the server
        (an update follows a pause, which may have dropped it)."""
        with self._cond:
            if self._updating is not None:
                raise EngineError(f"vllm engine: update to v{self._updating} is still open; finish it before starting v{version}")
            if self.version is not None and version <= self.version:
                raise EngineError(f"vllm engine: an update to v{version} would not move forward from v{self.version}")
        if self.current is not None and self.current not in self.adapters():
            raise self._dropped("the pause before the update" if self._paused else "the server")
        with self._cond:
            self._updating = version

    def update_weights(self, update: WeightUpdate) -> None:
        """Load the update's adapter as ``<job>-v<version>`` (never a name the server holds)."""
        if update.version != self._updating:
            raise EngineError(f"vllm engine: update_weights(v{update.version}) outside its update (open: v{self._updating})")
        if update.kind != "adapter" or update.path is None:
            raise EngineError(
                "the vllm engine loads LoRA adapters from a directory (WeightUpdate(kind='adapter', path=...)); full weights "
                "need vLLM's NCCL weight transfer, which it does not drive: give the job a lora section or use rollout.engine: hf"
            )
        digest = tree_sha256(update.path)
        if update.sha256 is not None and digest != update.sha256:
            raise WeightSyncError(
                f"adapter files at {update.path} hash to {digest[:12]}, the learner's manifest says {update.sha256[:12]}: "
                "they changed after the learner wrote them"
            )
        name = adapter_name(self.job, update.version)
        if name in self.adapters():
            raise EngineError(
                f"vLLM server {self.url} already holds adapter {name!r}; reloading a name in place serves stale "
                "prefix-cache blocks (vllm#42125): each version loads under a new name"
            )
        if update.probe_tokens and not self._base_rows:  # the base model's, before any adapter of ours
            rows = [tuple(int(t) for t in r) for r in update.probe_tokens]
            self._base_rows = dict(zip(rows, (r[1:] for r in self._score(self._base(), [list(r) for r in rows])), strict=True))
            self._seen.update(rows)
        self._seen_before = set(self._seen)  # rows a prefix cache may answer for the new adapter
        self._call("POST", "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": update.path})
        self._pending = update

    def finish_weight_update(self, version: int) -> None:
        """Check what the server holds (see the module docstring), then sample with it."""
        update = self._pending
        if version != self._updating or update is None or update.version != version:
            raise EngineError(f"vllm engine: finish_weight_update(v{version}) but the open update is v{self._updating}")
        name = adapter_name(self.job, version)
        try:
            if name not in self.adapters():
                raise WeightSyncError(f"vLLM server {self.url} does not list adapter {name!r} (v{version}) after loading it")
            self._check_probe(update, name)
            verify_sync(f"vLLM server {self.url}", version, digest=tree_sha256(update.path or ""), sha256=update.sha256)
        except BaseException:
            with self._cond:
                self._updating, self._pending = None, None
            raise
        with self._cond:
            if self.current is not None:
                self._retiring.append(self.current)
            self.current, self.version, self._updating, self._pending = name, version, None, None
        self._retire_idle()

    def _check_probe(self, update: WeightUpdate, name: str) -> None:
        """The server's probe logprobs under ``name`` against the learner's, row by row; a mismatch
        whose numbers show a known pitfall is named (see the module docstring)."""
        if not update.probe_tokens:
            return
        rows = [tuple(int(t) for t in r) for r in update.probe_tokens]
        got = dict(zip(rows, (r[1:] for r in self._score(name, [list(r) for r in rows])), strict=True))
        want = {r: list(lp)[1:] for r, lp in zip(rows, update.probe_logprobs, strict=True)}
        self._seen.update(rows)
        tol = self.options.probe_tolerance
        where = f"vLLM server {self.url}: adapter {name!r} (v{update.version})"

        def gap(a: dict[tuple[int, ...], list[float]], b: dict[tuple[int, ...], list[float]], keep: Any = None) -> float | None:
            common = [r for r in rows if r in a and r in b and (keep is None or keep(r))]
            return probe_gap([a[r] for r in common], [b[r] for r in common]) if common else None

        old, new = gap(got, want, lambda r: r in self._seen_before), gap(got, want, lambda r: r not in self._seen_before)
        if old is not None and new is not None and old > tol >= new:
            raise WeightSyncError(
                f"{where}: prompts this server scored before come back {old:.3g} nats per token away from the learner's, "
                f"new prompts agree ({new:.3g}): a stale prefix cache reused across adapters (vllm#42125); the server "
                "must key cached blocks by adapter (a new name per version, no in-place reload)"
            )
        from_base, learner_from_base = gap(got, self._base_rows), gap(want, self._base_rows)
        if from_base is not None and learner_from_base is not None and from_base <= SAME and learner_from_base > MOVED:
            raise WeightSyncError(
                f"{where} loaded (200 OK) but changes nothing: the server's probe logprobs are the base model's, the "
                f"learner's differ by {learner_from_base:.3g} nats per token; its module names do not match the served "
                "model's (vllm#34186): check lora.target_modules against the server's model"
            )
        previous, learner_previous = self._server_rows.get(self.current or ""), self._learner_rows.get(self.current or "")
        if previous is not None and learner_previous is not None:
            repeat, moved = gap(got, previous), gap(want, learner_previous)
            if repeat is not None and moved is not None and repeat <= SAME and moved > MOVED:
                raise WeightSyncError(
                    f"{where} answers the probe exactly as {self.current!r} did while the learner's weights moved by "
                    f"{moved:.3g} nats per token: the server holds the previous weights under the new name (an adapter "
                    "read from a stale path or re-read in place, SkyRL#1606)"
                )
        verify_sync(f"vLLM server {self.url}", update.version, digest=None, sha256=None, probe=[got[r] for r in rows],
                    learner_probe=[want[r] for r in rows], tolerance=tol)
        self._server_rows[name], self._learner_rows[name] = got, want

    def _retire_idle(self) -> None:
        """Unload the retired versions no request in flight names."""
        with self._cond:
            idle = [n for n in self._retiring if self._in_flight[n] == 0]
            self._retiring = [n for n in self._retiring if n not in idle]
        for name in idle:
            self._server_rows.pop(name, None)
            self._learner_rows.pop(name, None)
            self._call("POST", "/v1/unload_lora_adapter", json={"lora_name": name})

    def in_flight(self) -> dict[str, int]:
        """Requests in flight per model name (a version is unloaded only at 0)."""
        with self._cond:
            return {k: v for k, v in self._in_flight.items() if v}

    # ---- pause --------------------------------------------------------------------------------
    def pause(self, mode: PauseMode = "wait") -> None:
        mode = check_pause_mode(mode)
        with self._cond:
            self._paused = mode
        self._call("POST", "/pause", params={"mode": mode})

    def resume(self) -> None:
        """Resume the server, then check it still holds the adapter sampled with."""
        self._call("POST", "/resume")
        with self._cond:
            self._paused = None
            self._cond.notify_all()
        if self.current is not None and self.current not in self.adapters():
            raise self._dropped("the pause")

    def _dropped(self, when: str) -> WeightSyncError:
        return WeightSyncError(
            f"vLLM server {self.url} dropped adapter {self.current!r} (v{self.version}) by {when}: sleep or pause released "
            "its LoRA buffers (verl#7434) and requests would sample from the base model; run the server without sleep mode"
        )

    # ---- state --------------------------------------------------------------------------------
    def health(self) -> EngineHealth:
        try:
            models = self.models()
        except EngineError as e:
            return EngineHealth(ok=False, weight_version=self.version, detail=str(e))
        bases = [m["id"] for m in models if not m.get("parent")]
        if self.options.model is not None and self.options.model not in bases:
            return EngineHealth(ok=False, detail=f"the vLLM server at {self.url} serves {bases}, not rollout.engine_options.model {self.options.model!r}")
        with self._cond:
            return EngineHealth(
                ok=True, weight_version=self.version, adapters=tuple(m["id"] for m in models if m.get("parent")),
                paused=self._paused, in_flight=sum(self._in_flight.values()), detail=f"vLLM server {self.url}",
            )

    def close(self) -> None:
        self.http.close()


def _stop_reason(finish: str | None, stop: Any, eos: set[int]) -> str:
    """vLLM's ``finish_reason`` and ``stop_reason`` as a :data:`tinker_core.engines.STOP_REASONS` value."""
    if finish == "length":
        return "length"
    if finish == "abort":
        return "abort"
    if stop is None:
        return "eos"
    if isinstance(stop, int):
        return "eos" if stop in eos else "stop_id"
    return "stop_string"
