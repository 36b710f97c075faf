"""The ``vllm`` rollout engine: an HTTP client of a vLLM server (see :mod:`tinker_engine_vllm.engine`)."""

from __future__ import annotations

__all__ = ["VLLMEngine", "VLLMOptions"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from tinker_engine_vllm import engine

        return getattr(engine, name)
    raise AttributeError(name)
