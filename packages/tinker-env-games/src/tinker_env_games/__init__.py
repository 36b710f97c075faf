"""tinker-env-games: OpenTinker environment plugin for multi-turn and two-player games.

Registers ``games/guess-number-v0``, ``games/tictactoe-v0`` and ``games/connect-four-v0`` (see
:mod:`tinker_env_games.plugin`), and provides opponents that need no model
(:mod:`tinker_env_games.opponents`) and the multi-agent episode coordinator
(:mod:`tinker_env_games.coordinator`). Names below load on first use, so importing the package
(which plugin discovery does) costs almost nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "GuessNumberEnv": "tinker_env_games.guess_number",
    "BoardGameEnv": "tinker_env_games.board",
    "TicTacToeEnv": "tinker_env_games.tictactoe",
    "ConnectFourEnv": "tinker_env_games.connect_four",
    "RandomAgent": "tinker_env_games.opponents",
    "MinimaxAgent": "tinker_env_games.opponents",
    "Coordinator": "tinker_env_games.coordinator",
    "EpisodeResult": "tinker_env_games.coordinator",
    "Turn": "tinker_env_games.coordinator",
    "play_episode": "tinker_env_games.coordinator",
    "play_episode_async": "tinker_env_games.coordinator",
    "play_episodes": "tinker_env_games.coordinator",
}

__all__ = [
    "BoardGameEnv",
    "ConnectFourEnv",
    "Coordinator",
    "EpisodeResult",
    "GuessNumberEnv",
    "MinimaxAgent",
    "RandomAgent",
    "TicTacToeEnv",
    "Turn",
    "__version__",
    "play_episode",
    "play_episode_async",
    "play_episodes",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover
    from tinker_env_games.board import BoardGameEnv
    from tinker_env_games.connect_four import ConnectFourEnv
    from tinker_env_games.coordinator import (
        Coordinator,
        EpisodeResult,
        Turn,
        play_episode,
        play_episode_async,
        play_episodes,
    )
    from tinker_env_games.guess_number import GuessNumberEnv
    from tinker_env_games.opponents import MinimaxAgent, RandomAgent
    from tinker_env_games.tictactoe import TicTacToeEnv
