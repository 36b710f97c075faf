"""The ``vllm`` entry point: registers the engine (its module, with httpx, is imported when built)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinker_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from tinker_core.engines import EngineContext
    from tinker_core.hookspecs import RolloutEngineRegister


def vllm_engine(context: EngineContext) -> Any:
    """A vLLM server over HTTP (``rollout.engine_options``: url, model, timeout_s, probe_tolerance)."""
    from tinker_engine_vllm.engine import VLLMEngine

    return VLLMEngine.from_context(context)


@hookimpl
def opentinker_register_rollout_engines(register: RolloutEngineRegister) -> None:
    register("vllm", vllm_engine, description="a vLLM server over HTTP, versioned LoRA adapters checked after each sync")
