"""OpenTinker serving: an OpenAI-compatible HTTP server on the project's sampler."""
