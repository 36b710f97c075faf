"""The rollout proxy: a job's policy behind OpenAI's API, recording every call's tokens.

An agent program (a plain script with the ``openai`` client, an agent framework) becomes a job's
policy by pointing its ``base_url`` at this proxy (``agent/program-v0`` jobs:
:mod:`tinker_algos.rollout.agent_program`). Routes: ``POST /v1/chat/completions`` (``tools`` and
``tool_calls`` as in :mod:`.chat_tools`; ``stream: true`` answers server-sent events),
``POST /v1/completions`` (one prompt: text or token ids; streamed too), ``POST /v1/responses``
(the Responses API, answered as a chat call: :mod:`.routes.responses_api`), ``GET /v1/models`` and
``GET /health``. ``response_format`` and ``tool_choice`` ``"required"`` / a named function
constrain the sample (:mod:`.routes.constrained`): the recorded logprobs are then under the masked
distribution the tokens were drawn from.

**Which episode.** :meth:`RolloutProxy.open_episode` gives each episode a key of its own: 32
random bytes (``secrets.token_urlsafe``), valid at this proxy only, for that episode only, and
revoked when the episode closes (its agent returned or timed out). A call proves its episode in
one place only, ``Authorization: Bearer <key>`` (what ``openai.OpenAI(api_key=key)`` sends); a
call without a live key is refused with a 401 before its body is read, and one that tries the
episode's id in the ``X-OpenTinker-Episode`` header or the ``user`` field (read by earlier
versions) is told where the key goes. Episode ids (``ep-<group>-<k>``) seed the sampling; they are
not credentials, so a sibling agent or another local process that guesses one gets nothing.

**Bounded prompts.** As ``opentinker serve`` does (:attr:`tinker_serve.served.ServedModels.max_prompt_chars`),
a prompt of more characters than the context can hold is refused (400,
``context_length_exceeded``, naming both limits) *before* it is tokenized, and one of more
tokens after; the body itself is bounded by :data:`~tinker_serve.protocol.MAX_REQUEST_BYTES` (413).

**What is recorded** (:class:`tinker_algos.rollout.agent_calls.ProxyCall`): the prompt's token ids as
rendered, the sampled ids, their logprobs under the distribution they were drawn from and the
finish reason. Training uses these ids; nothing is decoded and encoded again.

**Token-exact turns.** When a chat request repeats the episode's previous request's messages,
then the proxy's own reply (content and tool calls), then new messages (tool results, a user
turn), its prompt is the previous prompt + the sampled tokens + the chat template's delta for the
new messages (:meth:`tinker_algos.model.prompts.PromptRenderer.next`, as env rollouts render turns), so
the trajectory holds exactly the tokens the policy sampled. Any other request is rendered afresh
from its messages; if that does not extend the previous context, the episode gets a new segment
(:func:`tinker_algos.rollout.agent_calls.merge_calls`).

**Tool call ids** are ``call_<i>_<k>``: the ``k``-th ``<tool_call>`` block of the episode's
``i``-th call, unique in an episode as OpenAI's are (the OpenAI Agents SDK drops a call whose id
it has seen from the history it sends back, or refuses it after a handoff) and the same for the
same seed.

**Demonstrations.** An episode opened with ``demonstrate`` (a function of the call's OpenAI
messages returning the reply: text, or an assistant message with ``tool_calls``, written in the
default format as an assistant message in a request is) is answered with that reply instead of a
sample: its tokens, then the template's end of turn, recorded with logprob 0, so an SFT warm
start trains on exactly the prompts the agent's calls render to
(:func:`tinker_algos.rollout.agent_program.agent_demonstrations`). A demonstration that fails or is
not text or such a message is a 500 naming the episode's ``demo``.

**Sampling.** The job decides how the policy samples: temperature, top-p and top-k come from the
job (the request's are ignored, and so are its penalties, so the recorded logprobs are the behaviour policy the loss
expects); a call samples at most the job's ``rollout.max_new_tokens`` (fewer when the request's
``max_tokens`` asks); stop strings are the request's. ``n`` must be 1. The ``model`` name is not
checked. A streamed answer arrives when its sample is complete (one content, tool-call or text
delta), since the tokens are recorded first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tinker_algos.model.models import PolicyModel
from tinker_algos.model.prompts import Conversation, PromptRenderer, TemplateError
from tinker_algos.rollout.agent_calls import EpisodeLog, ProxyCall, UnknownEpisode
from tinker_algos.sampling.sampler import SamplingParams
from tinker_core.http_limits import BodyGuard, HttpLimits, serve_in_thread, uvicorn_config
from tinker_core.seeding import derive_seed
from tinker_serve.chat_tools import forced_tools, request_messages, tool_message_fields
from tinker_serve.engine import Engine
from tinker_serve.protocol import (
    MAX_REQUEST_BYTES,
    APIError,
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    bad_request,
    finish_reason,
    install_error_handlers,
    refused,
    usage,
)
from tinker_serve.routes.chat_completions import constrain
from tinker_serve.routes.constrained import response_format_schema
from tinker_serve.routes.generation import check_chars, completion_prompts, failed, generate, sse
from tinker_serve.routes.responses_api import responses_router
from tinker_serve.served import prompt_char_bound

EPISODE_HEADER = "x-opentinker-episode"
"""A header that named a call's episode in earlier versions; now only the 401 mentions it."""
KEY_PLACE = "Authorization: Bearer <key> (openai.OpenAI(api_key=key))"
"""Where a call sends its episode's key: the one place the proxy reads it."""
MODEL_NAME = "policy"


@dataclass
class _Served:
    """What :mod:`.app`'s request helpers read of a served model: the policy, its engine, its
    context length and the most characters a prompt that fits it can have (checked before
    tokenizing, as ``serve`` does)."""

    policy: PolicyModel
    engine: Engine
    max_positions: int | None
    max_prompt_chars: int | None = None


@dataclass
class _LastChat:
    """An episode's previous chat call: what the next one must repeat to extend it exactly."""

    messages: list[dict[str, Any]]
    tools: tuple[dict[str, Any], ...]
    conv: Conversation
    context: list[int]  # prompt + completion ids
    completion: list[int]
    text: str
    reply: dict[str, Any] = field(default_factory=dict)  # the proxy's answer as the next request repeats it


class RolloutProxy:
    """The proxy over ``policy`` (see the module docstring). ``params`` are the job's sampling
    parameters (``seed`` seeds each call with the episode and the call's index);
    :meth:`running` serves it on a free local port (:attr:`base_url`)."""

    def __init__(
        self, policy: PolicyModel, renderer: PromptRenderer, params: SamplingParams, *, adapter: str | None = None,
        max_context_tokens: int | None = None, max_batch: int = 64,
    ) -> None:
        self.renderer, self.params, self.adapter = renderer, params, adapter
        engine = Engine(policy, max_batch=max_batch, extra_eos_ids=renderer.extra_eos_ids)
        limit = max_context_tokens or engine.max_positions
        self.served = _Served(policy, engine, limit, prompt_char_bound(policy.tokenizer, limit))
        self.log = EpisodeLog()
        self._keys: dict[bytes, str] = {}  # sha256(key) -> episode id
        self._keys_lock = threading.Lock()
        self._last: dict[str, _LastChat] = {}
        self._demos: dict[str, Callable[[list[dict[str, Any]]], Any]] = {}
        self.base_url = ""
        self.app = self._app()

    # ---- episodes ------------------------------------------------------------------------------
    def open_episode(self, episode_id: str, *, demonstrate: Callable[[list[dict[str, Any]]], Any] | None = None) -> str:
        """Accept calls for ``episode_id``; the episode's key, which its calls send as
        ``Authorization: Bearer <key>`` (the module docstring). ``demonstrate``: answer its chat
        calls with ``demonstrate(messages)`` instead of samples (the module docstring)."""
        key = secrets.token_urlsafe(32)
        self.log.open(episode_id)
        if demonstrate is not None:
            self._demos[episode_id] = demonstrate
        with self._keys_lock:
            self._keys[_digest(key)] = episode_id
        return key

    def close_episode(self, episode_id: str) -> list[ProxyCall]:
        """Revoke the episode's key (later calls get a 401); its recorded calls, in order."""
        with self._keys_lock:
            for digest in [d for d, ep in self._keys.items() if ep == episode_id]:
                del self._keys[digest]
        self._last.pop(episode_id, None)
        self._demos.pop(episode_id, None)
        return self.log.close(episode_id)

    def episode_of(self, headers: Headers) -> str | None:
        """The open episode whose key ``headers`` carry as ``Authorization: Bearer``, else None."""
        scheme, _, key = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        with self._keys_lock:
            episode = self._keys.get(_digest(key.strip()))
        return episode if episode is not None and self.log.is_open(episode) else None

    @contextlib.contextmanager
    def running(self) -> Iterator[RolloutProxy]:
        """Serve on ``127.0.0.1`` (a free port) with the engine running, until the block ends."""
        import uvicorn

        limits = HttpLimits(MAX_REQUEST_BYTES)
        server = uvicorn.Server(uvicorn_config(self.app, limits, host="127.0.0.1", port=0, log_level="warning"))
        self.served.engine.start()
        try:
            with serve_in_thread(server, "opentinker-rollout-proxy", "the rollout proxy") as port:
                self.base_url = f"http://127.0.0.1:{port}/v1"
                yield self
        finally:
            self.served.engine.stop()

    # ---- requests ------------------------------------------------------------------------------
    def _episode(self, http: Request) -> str:
        episode = self.episode_of(http.headers)
        if episode is None:
            raise _unauthorized(http.headers)
        return episode

    def _call_params(self, asked: int | None, stop: list[str], episode: str, prompt_len: int) -> SamplingParams:
        cap = self.params.max_new_tokens
        room = (self.served.max_positions or prompt_len + cap) - prompt_len
        if room < 1:
            raise bad_request(f"the prompt has {prompt_len} tokens, the whole context the job allows", "messages", "context_length_exceeded")
        n_calls = len(self.log.calls(episode))
        seed = None if self.params.seed is None else derive_seed(self.params.seed, episode, n_calls)
        return dataclasses.replace(
            self.params, max_new_tokens=max(1, min(asked or cap, cap, room)), stop=tuple(stop), n=1, seed=seed,
            eos_token_ids=(*self.params.eos_token_ids, *self.renderer.extra_eos_ids),
        )

    async def _sample(self, ids: list[int], params: SamplingParams, http: Request) -> tuple[list[int], list[float], str, str]:
        """``(ids, logprobs, text, engine finish reason)`` of one sample of ``ids``."""
        tokens: list[int] = []
        logprobs: list[float] = []
        text, reason = "", "stop"
        async for _, ev in generate(self.served, [ids], params, self.adapter, 0, False, http):  # type: ignore[arg-type]
            if ev.finish_reason == "error":
                raise failed(ev)
            text += ev.text
            for t in ev.tokens:
                tokens.append(t.id)
                logprobs.append(t.logprob if t.sampled_logprob is None else t.sampled_logprob)
            reason = ev.finish_reason or reason
        return tokens, logprobs, text, reason

    def _chat_prompt(self, episode: str, messages: list[dict[str, Any]], tools: tuple[dict[str, Any], ...]) -> tuple[list[int], Conversation]:
        """The prompt ids: the previous call's context + the template's delta when the request
        extends it (the module docstring), else the messages rendered afresh."""
        last = self._last.get(episode)
        n = len(last.messages) if last else 0
        if last and tools == last.tools and messages[:n] == last.messages and len(messages) > n + 1 and messages[n] == last.reply:
            conv = Conversation(list(last.conv.messages), last.conv.tools)
            with contextlib.suppress(TemplateError, ValueError, TypeError):
                delta = self.renderer.next(conv, last.completion, last.text, messages[n + 1 :])
                return [*last.context, *delta], conv
        return self.renderer.start(messages, "", tools)

    async def chat(self, body: ChatRequest, http: Request) -> Any:
        episode = self._episode(http)
        if body.n != 1:
            raise bad_request("the rollout proxy samples one answer per call; set n to 1", "n")
        body.refuse_unsupported(("functions", "function_call", "suffix"))
        messages, tools = request_messages(body)
        forced, schema = forced_tools(body, tools), response_format_schema(body.response_format)
        check_chars(self.served, sum(len(m["content"]) for m in messages) + len(json.dumps(tools)), "messages")  # type: ignore[arg-type]
        ids, conv = await run_in_threadpool(self._chat_prompt, episode, messages, tools)
        params = self._call_params(body.max_completion_tokens or body.max_tokens, body.stop_list(), episode, len(ids))
        await constrain(self.served.engine, params, body, schema, tools, forced)  # response_format, tool_choice
        n_call = len(self.log.calls(episode))
        demo = self._demos.get(episode)
        if demo is not None:
            tokens, logprobs, text, raw_reason = await run_in_threadpool(self._demonstrated, demo, body)
        else:
            tokens, logprobs, text, raw_reason = await self._sample(ids, params, http)
        fields, called = tool_message_fields(text, tools, id_prefix=f"call_{n_call}_")
        reason = "tool_calls" if called else (finish_reason(raw_reason) or "stop")
        self._record(episode, ProxyCall(tuple(ids), tuple(tokens), tuple(logprobs), reason, text, "chat"))
        reply = request_messages(ChatRequest(model=MODEL_NAME, messages=[ChatMessage(role="assistant", **fields)]))[0][0]
        self._last[episode] = _LastChat([*messages], tools, conv, [*ids, *tokens], tokens, text, reply)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if body.stream:
            return sse(_chat_chunks(rid, created, fields, reason, usage(len(ids), len(tokens)), body))
        return {"id": rid, "object": "chat.completion", "created": created, "model": MODEL_NAME,
                "choices": [{"index": 0, "message": {"role": "assistant", **fields}, "finish_reason": reason, "logprobs": None}],
                "usage": usage(len(ids), len(tokens))}

    def _demonstrated(self, demo: Callable[[list[dict[str, Any]]], Any], body: ChatRequest) -> tuple[list[int], list[float], str, str]:
        """``(ids, logprobs, text, finish reason)`` of the demonstrated reply to ``body`` (the
        module docstring): its text's tokens and the template's end of turn, logprobs 0."""
        try:
            reply = demo([m.model_dump(exclude_none=True) for m in body.messages])
            if isinstance(reply, dict):
                msg = ChatMessage(role="assistant", content=reply.get("content"), tool_calls=reply.get("tool_calls"))
                reply = request_messages(ChatRequest(model=MODEL_NAME, messages=[msg]))[0][0]["content"]
            if not isinstance(reply, str):
                raise TypeError(f"it returned {type(reply).__name__}")
        except Exception as e:  # noqa: BLE001 - the agent's demo function is its own code
            raise APIError(500, f"the demonstration failed ({type(e).__name__}: {e}); env.kwargs.demo must return the reply "
                           "as text or as an assistant message {'content': ..., 'tool_calls': [...]}", type="server_error") from None
        ids = list(self.served.policy.tokenizer.encode(reply, add_special_tokens=False))
        if self.renderer.chat and self.renderer.end_of_turn_id is not None:
            ids.append(int(self.renderer.end_of_turn_id))
        return ids, [0.0] * len(ids), reply, "stop"

    async def completion(self, body: CompletionRequest, http: Request) -> Any:
        episode = self._episode(http)
        if episode in self._demos:
            raise bad_request("a demonstrated episode answers chat calls only (POST /v1/chat/completions)", "prompt")
        body.refuse_unsupported(("suffix", "best_of"))
        if body.n != 1 or body.echo:
            which = "n" if body.n != 1 else "echo"
            raise bad_request(f"the rollout proxy's completions take one prompt, n=1 and no echo; drop '{which}'", which)
        prompts = await run_in_threadpool(completion_prompts, self.served, body.prompt)  # type: ignore[arg-type]
        if len(prompts) != 1:
            raise bad_request("the rollout proxy takes one prompt per call", "prompt")
        ids = prompts[0]
        params = self._call_params(body.max_tokens, body.stop_list(), episode, len(ids))
        tokens, logprobs, text, raw_reason = await self._sample(ids, params, http)
        reason = finish_reason(raw_reason) or "stop"
        self._record(episode, ProxyCall(tuple(ids), tuple(tokens), tuple(logprobs), reason, text, "completion"))
        out = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()), "model": MODEL_NAME,
               "choices": [{"index": 0, "text": text, "finish_reason": reason, "logprobs": None}],
               "usage": usage(len(ids), len(tokens))}
        if not body.stream:
            return out
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            yield {**out, "usage": None}
            if include_usage:
                yield {**out, "choices": [], "usage": out["usage"]}

        return sse(chunks())

    def _record(self, episode: str, call: ProxyCall) -> None:
        try:
            self.log.add(episode, call)
        except UnknownEpisode:  # closed while sampling (its agent timed out): the answer is not recorded
            raise APIError(401, f"episode {episode!r} closed while this call ran", code="invalid_api_key") from None

    def _app(self) -> FastAPI:
        app = FastAPI(title="opentinker rollout proxy", docs_url=None, redoc_url=None, openapi_url=None)
        app.add_middleware(BodyGuard, limits=HttpLimits(MAX_REQUEST_BYTES), respond=refused, what="the rollout proxy's limit")
        app.add_middleware(_EpisodeKeys, proxy=self)  # outermost: no key, no body read
        v1 = APIRouter(prefix="/v1")
        v1.add_api_route("/chat/completions", self.chat, methods=["POST"], response_model=None)
        v1.add_api_route("/completions", self.completion, methods=["POST"], response_model=None)
        v1.include_router(responses_router(self.chat))  # the Responses API, answered (and recorded) as chat

        @v1.get("/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "opentinker"}]}

        app.include_router(v1)

        @app.get("/health")
        async def health() -> dict[str, Any]:
            return {"status": "ok", "rows": self.served.engine.active_rows, "waiting": self.served.engine.waiting}

        install_error_handlers(app)
        return app


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _unauthorized(headers: Headers) -> APIError:
    """The 401 of a call without a live episode key; it names the one place the key goes."""
    where = "its X-OpenTinker-Episode header names no episode: " if EPISODE_HEADER in headers else ""
    return APIError(
        401, f"this call carries no open episode's key; {where}send the key the episode's client was given as "
        f"{KEY_PLACE}, the only place it is read (not the X-OpenTinker-Episode header, not the 'user' field); "
        "a key is revoked when its episode's agent returns or times out", code="invalid_api_key",
    )


class _EpisodeKeys:
    """Refuse a ``POST /v1/...`` without a live episode key before its body is read (401)."""

    def __init__(self, app: ASGIApp, proxy: RolloutProxy) -> None:
        self.app, self.proxy = app, proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].startswith("/v1/"):
            headers = Headers(scope=scope)
            if self.proxy.episode_of(headers) is None:
                err = _unauthorized(headers)
                await JSONResponse(err.body(), status_code=err.status)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _chat_chunks(
    rid: str, created: int, fields: dict[str, Any], reason: str, used: dict[str, int], body: ChatRequest
) -> AsyncIterator[dict[str, Any]]:
    """A finished chat answer as OpenAI's stream: the role, the content or tool calls, the finish."""

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": MODEL_NAME, "choices": choices, **extra}

    yield chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
    delta = {k: v for k, v in fields.items() if v}
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": j, **c} for j, c in enumerate(delta["tool_calls"])]
    yield chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}])
    if body.stream_options and body.stream_options.include_usage:
        yield chunk([], usage=used)


def start_rollout_proxy(
    policy: PolicyModel, renderer: PromptRenderer, params: SamplingParams, *, adapter: str | None = None,
    max_context_tokens: int | None = None,
) -> contextlib.AbstractContextManager[RolloutProxy]:
    """The ``openai`` rollout proxy (hook ``opentinker_register_rollout_proxies``): a
    :class:`RolloutProxy` served while the returned context manager is open."""
    return RolloutProxy(policy, renderer, params, adapter=adapter, max_context_tokens=max_context_tokens).running()


__all__ = ["EPISODE_HEADER", "KEY_PLACE", "RolloutProxy", "start_rollout_proxy"]
