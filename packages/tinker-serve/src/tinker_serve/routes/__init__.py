"""The OpenAI routes' request handling, by seam: :mod:`.generation` (request -> engine -> OpenAI
shapes), :mod:`.chat_completions` (the chat route), :mod:`.constrained` (``response_format`` and
forced tool calls as a grammar's mask) and :mod:`.responses_api` (``/v1/responses`` over chat)."""
