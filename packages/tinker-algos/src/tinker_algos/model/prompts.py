"""Prompt rendering: an env's observation (text or chat messages) -> the policy's token ids.

The one step between environments and the sampler. A :class:`PromptRenderer` is built from a
tokenizer and ``model.chat_template`` (:meth:`PromptRenderer.from_config`):

* ``auto`` (default): the tokenizer's chat template when it has one, plain text otherwise. The
  tiny preset's character template (``role: content`` lines, :data:`CHAR_CHAT_TEMPLATE`) counts as
  plain: text observations reach the tiny model as they are, as before chat rendering existed, so
  tiny-model runs and their metrics are unchanged.
* ``tokenizer``: the tokenizer's chat template; a ConfigError naming the field when it has none.
* ``none``: plain text (chat-message observations as ``role: content`` lines).
* the path of a Jinja file: that chat template.

Chat rendering (a chat template in use), turn by turn:

1. The first observation is the conversation's first user message (a list of messages is used as
   is), after the system prompt (the job's ``env.system_prompt``, else the env's
   ``EnvSpec.system_prompt``; none when empty) unless the list starts with a system message;
   rendered with ``add_generation_prompt=True`` and encoded without the tokenizer's own special
   tokens (the template writes them).
2. The tokens the policy sampled are appended exactly as sampled (token-in, token-out: never
   decoded and re-encoded), its end-of-turn token included when it emitted one.
3. The env's reply is the next user message (a list: its messages, e.g. one ``tool`` message).
   Its tokens are the *delta* between the templated conversation with and without it, so earlier
   tokens are never re-encoded: first what the template writes after an assistant message that
   the policy did not sample itself (``<|im_end|>\\n`` in ChatML after a turn cut off at the
   token limit or by a stop string; only ``\\n`` after a turn the policy ended with
   ``<|im_end|>``), then the new message and the generation prompt. A template that renders
   earlier turns differently once a message is added (not append-only) raises TemplateError.

Tools (an env whose ``EnvSpec.tools`` is not empty; :mod:`tinker_core.tools`): a template that
renders a ``tools`` list (probed once: :attr:`PromptRenderer.native_tools`) gets them through
``apply_chat_template(..., tools=...)`` on every render of the episode; any other chat template
gets the default format's instructions (:func:`tinker_core.tools.tools_system_prompt`) appended to
the system prompt (which they become when there is none). Tool results are ``tool`` messages; a
template that cannot render the ``tool`` role (it raises, or drops the content; probed once:
:attr:`PromptRenderer.tool_role`) gets them as one user message of
``<tool_response>...</tool_response>`` blocks instead. Plain rendering writes the instructions
before the first observation.

Plain rendering: the first observation is encoded with the tokenizer's special tokens (e.g.
``<bos>``), later ones without; chat messages are rendered first (the tokenizer's template for
``auto``, ``role: content`` lines for ``none``).

Stopping: :attr:`PromptRenderer.end_of_turn_id` is the special token the template closes an
assistant message with (``<|im_end|>`` in ChatML); :func:`eos_token_ids` gathers every id that
ends a turn (generation config, tokenizer, the tokenizer's template), and the sampler stops at them.

The prompts given to ``sample()`` directly (text, chat messages or ids) are rendered by
:func:`render_prompt` and encoded by :func:`encode_prompt` (their home was
:mod:`tinker_algos.model.tokenizer` until wave 4, which still re-exports them).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_algos.model.model_files import CHAR_CHAT_TEMPLATE
from tinker_core.errors import ConfigError, OpenTinkerError
from tinker_core.tools import tools_system_prompt

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from tinker_core.contracts import Observation

logger = logging.getLogger(__name__)

CHAT_TEMPLATE_MODES = ("auto", "tokenizer", "none")
FIELD = "model.chat_template"
_SENTINEL = "<<opentinker-assistant-content-7f3a>>"


class ChatTemplateError(ConfigError):
    """``model.chat_template`` cannot be used (a missing or broken file, a tokenizer without a
    template asked for one): a :class:`ConfigError` whose text is one line naming the field."""

    def __init__(self, message: str) -> None:
        super().__init__([message])
        self.args = (message,)


class TemplateError(OpenTinkerError, ValueError):
    """A chat template that cannot render a multi-turn episode by appending (see the module docstring)."""


@dataclass
class Conversation:
    """One episode's chat so far (chat rendering only): the messages its tokens render, and the
    tools the template is given (native tool rendering only)."""

    messages: list[dict[str, str]] = field(default_factory=list)
    tools: tuple[dict[str, Any], ...] = ()


def as_messages(observation: object, role: str = "user") -> list[dict[str, str]]:
    """An observation as chat messages: text is one ``role`` message; a list is checked and copied."""
    if isinstance(observation, str):
        return [{"role": role, "content": observation}]
    if not isinstance(observation, Sequence):
        raise TypeError(f"an observation is a str or a list of chat messages, got {type(observation).__name__}")
    out = []
    for i, m in enumerate(observation):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"observation message {i} needs str 'role' and 'content' keys, got {m!r}")
        out.append(dict(m))
    return out


def _template_of(tokenizer: PreTrainedTokenizerBase) -> str | None:
    t = getattr(tokenizer, "chat_template", None)
    if isinstance(t, dict):  # several named templates: the default one
        t = t.get("default")
    return t or None


def _special_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", [])}
    for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(t, "special", False):
            ids.add(int(i))
    return ids


def render_messages(
    tokenizer: PreTrainedTokenizerBase,
    template: str | None,
    messages: list[dict[str, str]],
    generation_prompt: bool,
    tools: Sequence[dict[str, Any]] = (),
) -> str:
    """Chat messages as text: through ``template`` (a Jinja chat template, given ``tools`` when
    there are any), or, when it is None, as plain ``role: content`` lines followed by
    ``assistant: `` for the generation prompt."""
    if template is None:
        lines = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return lines + ("assistant: " if generation_prompt else "")
    extra = {"tools": [dict(t) for t in tools]} if tools else {}
    text = tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=generation_prompt, **extra
    )
    return str(text)


_PROBE_NAME = "opentinker_probe_tool_7f3a"
_PROBE_TOOL = {"type": "function", "function": {"name": _PROBE_NAME, "description": "", "parameters": {"type": "object", "properties": {}}}}


def _probe(tokenizer: PreTrainedTokenizerBase, template: str) -> tuple[bool, bool]:
    """``(native_tools, tool_role)``: whether ``template`` renders a ``tools`` list, and ``tool`` messages."""
    user = {"role": "user", "content": "x"}
    try:
        native = _PROBE_NAME in render_messages(tokenizer, template, [user], True, [_PROBE_TOOL])
    except Exception:  # a template that fails on tools has no tool support
        native = False
    try:
        msgs = [user, {"role": "assistant", "content": "y"}, {"role": "tool", "content": _SENTINEL}]
        role = _SENTINEL in render_messages(tokenizer, template, msgs, True)
    except Exception:  # e.g. a template that raises on roles other than user/assistant/system
        role = False
    return native, role


def tool_responses_as_user(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """``messages`` with each run of ``tool`` messages merged into one user message of
    ``<tool_response>\ncontent\n</tool_response>`` blocks (for templates without a tool role)."""
    out: list[dict[str, str]] = []
    in_run = False
    for m in messages:
        if m["role"] != "tool":
            out.append(m)
            in_run = False
            continue
        block = f"<tool_response>\n{m['content']}\n</tool_response>"
        if in_run:
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + block}
        else:
            out.append({"role": "user", "content": block})
        in_run = True
    return out


def _closing(tokenizer: PreTrainedTokenizerBase, template: str) -> tuple[str, int | None, str]:
    """``(closing, end_of_turn_id, end_of_turn_text)``: what the template writes after an
    assistant message's content, and the special token that text starts with (None if none)."""
    text = render_messages(
        tokenizer, template, [{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL}], False
    )
    at = text.rfind(_SENTINEL)
    if at < 0:
        return "", None, ""
    closing = text[at + len(_SENTINEL) :]
    ids = tokenizer.encode(closing, add_special_tokens=False) if closing else []
    if ids and int(ids[0]) in _special_ids(tokenizer):
        eot_text = str(tokenizer.convert_ids_to_tokens(int(ids[0])))
        if closing.startswith(eot_text):
            return closing, int(ids[0]), eot_text
    return closing, None, ""


def template_end_of_turn_id(tokenizer: PreTrainedTokenizerBase, template: str | None = None) -> int | None:
    """The special token a chat template closes an assistant message with (``<|im_end|>`` in
    ChatML); ``template`` defaults to the tokenizer's. None without a template or such a token."""
    template = template if template is not None else _template_of(tokenizer)
    if not template:
        return None
    try:
        return _closing(tokenizer, template)[1]
    except Exception:  # a template that cannot render this probe names no end-of-turn token
        return None


def _ids(value: int | Iterable[int] | None) -> Iterable[int]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return (int(v) for v in value)


def eos_token_ids(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel | None = None, extra: Iterable[int] = ()) -> set[int]:
    """Every token id that ends a turn: the generation config's eos ids (``model``'s), the
    tokenizer's eos, the tokenizer's chat-template end-of-turn token, and ``extra``."""
    out = set(_ids(getattr(tokenizer, "eos_token_id", None)))
    gen = getattr(model, "generation_config", None)
    out |= set(_ids(getattr(gen, "eos_token_id", None)))
    eot = template_end_of_turn_id(tokenizer)
    if eot is not None:
        out.add(eot)
    out |= {int(t) for t in extra}
    return out


class PromptRenderer:
    """Renders an episode's observations to token ids (see the module docstring).

    ``template``: the chat template (None: plain ``role: content`` lines for chat messages).
    ``chat``: whether observations go through the template as chat turns (True) or reach the
    model as plain text (False; chat-message observations are rendered with ``template`` first).
    ``system_prompt``: replaces the env spec's system prompt given to :meth:`start` (the job's
    ``env.system_prompt``; ``""``: none); None keeps the env's.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, template: str | None, *, chat: bool, system_prompt: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.system_prompt = system_prompt
        self.chat = bool(chat and template is not None)
        self.closing, self.end_of_turn_id, self._eot_text = "", None, ""
        self.native_tools = False  # the template renders a ``tools`` list itself
        self.tool_role = True  # the template renders ``tool`` messages
        if template is not None:
            self.native_tools, self.tool_role = _probe(tokenizer, template)
        if self.chat:
            assert template is not None
            self.closing, self.end_of_turn_id, self._eot_text = _closing(tokenizer, template)

    @classmethod
    def from_config(cls, tokenizer: PreTrainedTokenizerBase, chat_template: str = "auto", *, field: str = FIELD) -> PromptRenderer:
        """The renderer ``model.chat_template`` asks for; a :class:`ChatTemplateError` naming
        ``field`` when the file is missing or unusable, or the tokenizer has no template and one is
        required."""
        own = _template_of(tokenizer)
        if chat_template == "none":
            return cls(tokenizer, None, chat=False)
        if chat_template == "auto":
            if own is None:
                return cls(tokenizer, None, chat=False)
            return cls._checked(tokenizer, own, own != CHAR_CHAT_TEMPLATE, field, "the tokenizer's chat template")
        if chat_template == "tokenizer":
            if own is None:
                raise ChatTemplateError(
                    f"{field}: 'tokenizer' asks for the tokenizer's chat template, but this tokenizer has none; "
                    "use 'auto' or 'none' for plain text, or give the path of a Jinja template file"
                )
            return cls._checked(tokenizer, own, True, field, "the tokenizer's chat template")
        path = Path(chat_template).expanduser()
        if not path.is_file():
            raise ChatTemplateError(
                f"{field}: {chat_template!r} is not 'auto', 'tokenizer', 'none' or an existing file; "
                "give the path of a Jinja chat-template file"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ChatTemplateError(f"{field}: cannot read {path}: {e}") from None
        return cls._checked(tokenizer, text, True, field, str(path))

    @classmethod
    def _checked(cls, tokenizer: PreTrainedTokenizerBase, template: str, chat: bool, field: str, what: str) -> PromptRenderer:
        try:
            renderer = cls(tokenizer, template, chat=chat)
            renderer.start("1+1=")
        except Exception as e:
            raise ChatTemplateError(f"{field}: {what} does not render a conversation: {type(e).__name__}: {e}") from None
        return renderer

    def with_system_prompt(self, system_prompt: str | None) -> PromptRenderer:
        """This renderer with ``system_prompt`` replacing the env's (itself when None)."""
        if system_prompt is None:
            return self
        out = copy.copy(self)
        out.system_prompt = system_prompt
        return out

    @property
    def extra_eos_ids(self) -> tuple[int, ...]:
        """Token ids the sampler should stop at besides the model's eos (the template's end of turn)."""
        return () if self.end_of_turn_id is None else (self.end_of_turn_id,)

    def text_of(self, observation: Observation) -> str:
        """An observation as plain text for a model without chat turns: text as is, messages rendered
        with the template."""
        if isinstance(observation, str):
            return observation
        return render_messages(self.tokenizer, self.template, self._messages(as_messages(observation)), True)

    def _messages(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        return messages if self.tool_role else tool_responses_as_user(messages)

    def start(self, observation: Observation, system_prompt: str = "", tools: Sequence[dict[str, Any]] = ()) -> tuple[list[int], Conversation]:
        """Token ids of an episode's first prompt, and the conversation to continue it with;
        ``tools``: the env's (``EnvSpec.tools``), rendered as the module docstring says."""
        tok = self.tokenizer
        if not self.chat:
            text = self.text_of(observation)
            if tools:
                text = f"{tools_system_prompt(tools)}\n\n{text}"
            return list(tok.encode(text, add_special_tokens=True)), Conversation()
        messages = self._messages(as_messages(observation))
        if self.system_prompt is not None:
            system_prompt = self.system_prompt
        if system_prompt and not (messages and messages[0]["role"] == "system"):
            messages = [{"role": "system", "content": system_prompt}, *messages]
        native = tuple(tools) if self.native_tools else ()
        if tools and not native:
            block = tools_system_prompt(tools)
            if messages and messages[0]["role"] == "system":
                messages = [{**messages[0], "content": f"{messages[0]['content']}\n\n{block}"}, *messages[1:]]
            else:
                messages = [{"role": "system", "content": block}, *messages]
        text = render_messages(tok, self.template, messages, True, native)
        return list(tok.encode(text, add_special_tokens=False)), Conversation(messages, native)

    def next(
        self, conversation: Conversation, action_tokens: Sequence[int], action_text: str, observation: Observation
    ) -> list[int]:
        """Token ids to append after the policy's ``action_tokens``: the env's reply ``observation``
        as the next message (the delta described in the module docstring)."""
        tok = self.tokenizer
        if not self.chat:
            return list(tok.encode(self.text_of(observation), add_special_tokens=False))
        before = [*conversation.messages, {"role": "assistant", "content": str(action_text)}]
        after = self._messages([*before, *as_messages(observation)])
        a = render_messages(tok, self.template, before, False, conversation.tools)
        u = render_messages(tok, self.template, after, True, conversation.tools)
        if not u.startswith(a) or not a.endswith(self.closing):
            raise TemplateError(
                "the chat template renders earlier turns differently once a message is added, so a "
                "multi-turn episode cannot be extended by appending tokens; use a template that only "
                f"appends ({FIELD}: a file) or '{FIELD}: none'"
            )
        closing = self.closing
        if self.end_of_turn_id is not None and action_tokens and int(action_tokens[-1]) == self.end_of_turn_id:
            closing = closing[len(self._eot_text) :]  # the policy wrote the end-of-turn token itself
        conversation.messages = after
        return list(tok.encode(closing + u[len(a) :], add_special_tokens=False))


__all__ = [
    "CHAT_TEMPLATE_MODES",
    "ChatTemplateError",
    "Conversation",
    "PromptRenderer",
    "TemplateError",
    "as_messages",
    "eos_token_ids",
    "render_messages",
    "template_end_of_turn_id",
    "tool_responses_as_user",
]


def _is_messages(prompt: object) -> bool:
    return isinstance(prompt, Sequence) and not isinstance(prompt, str)


def render_prompt(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[dict[str, str]],
    *,
    chat: bool | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """Render a prompt to text.

    * chat messages (a list of ``{"role", "content"}``): the tokenizer's chat template when it has
      one, else plain ``role: content`` lines followed by ``assistant: ``.
    * a string: used as is (completion style), unless ``chat=True``, which wraps it as one user
      message first.

    Templated text already contains any special tokens the template adds (e.g. ``<bos>``); encode
    it with :func:`encode_prompt`, which then adds no special tokens of its own.
    """
    if isinstance(prompt, str):
        if not chat:
            return prompt
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt}]
    elif _is_messages(prompt):
        messages = [dict(m) for m in prompt]
        for i, m in enumerate(messages):
            if "role" not in m or "content" not in m:
                raise ValueError(f"prompt message {i} needs 'role' and 'content' keys, got {sorted(m)}")
    else:
        raise TypeError(f"prompt must be a str or a list of chat messages, got {type(prompt).__name__}")
    return render_messages(tokenizer, getattr(tokenizer, "chat_template", None) or None, messages, add_generation_prompt)


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[dict[str, str]] | Sequence[int],
    *,
    chat: bool | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of a prompt: ids pass through; text is rendered with :func:`render_prompt`.

    Raw strings are encoded with the tokenizer's special tokens (e.g. a leading ``<bos>``);
    templated prompts without (the template adds them).
    """
    if _is_messages(prompt) and all(isinstance(x, int) for x in prompt):
        return [int(x) for x in prompt]  # type: ignore[arg-type,union-attr]
    templated = not isinstance(prompt, str) or bool(chat)
    if templated and not getattr(tokenizer, "chat_template", None):
        templated = False  # plain fallback rendering has no special tokens: add them
    text = render_prompt(tokenizer, prompt, chat=chat, add_generation_prompt=add_generation_prompt)  # type: ignore[arg-type]
    return list(tokenizer.encode(text, add_special_tokens=not templated))
