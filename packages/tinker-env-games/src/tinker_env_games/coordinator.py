"""The multi-agent coordinator, now in tinker-core (``from tinker_core import play_episode``).

Kept so ``from tinker_env_games.coordinator import play_episode`` goes on working; new code
imports these names from ``tinker_core``.
"""

from tinker_core import (
    DEFAULT_MAX_STEPS,
    DEFAULT_TURN_TIMEOUT_S,
    Agent,
    AgentTimeout,
    Coordinator,
    EpisodeResult,
    Turn,
    call_agent,
    call_agent_async,
    play_episode,
    play_episode_async,
    play_episodes,
)

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_TURN_TIMEOUT_S",
    "Agent",
    "AgentTimeout",
    "Coordinator",
    "EpisodeResult",
    "Turn",
    "call_agent",
    "call_agent_async",
    "play_episode",
    "play_episode_async",
    "play_episodes",
]
