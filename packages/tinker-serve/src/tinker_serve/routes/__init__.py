"""The OpenAI routes' request handling, by seam: :mod:`tinker_serve.routes.generation` (request -> engine -> OpenAI
shapes), :mod:`tinker_serve.routes.chat_completions` (the chat route), :mod:`tinker_serve.routes.constrained` (``response_format`` and
forced tool calls as a grammar's mask) and :mod:`tinker_serve.routes.responses_api` (``/v1/responses`` over chat)."""
