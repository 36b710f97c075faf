"""tinker-env-games: OpenTinker environment plugin for multi-turn and two-player games.

Registers ``games/guess-number-v0``, ``games/tictactoe-v0`` and ``games/connect-four-v0`` (see
:mod:`tinker_env_games.plugin`), and provides opponents that need no model
(:mod:`tinker_env_games.opponents`; the board games offer them by name in
``scripted_opponents``). The multi-agent episode coordinator lives in
:mod:`tinker_core.coordinator`; its names are re-exported here for compatibility. Names below
load on first use, so importing the package (which plugin discovery does) costs almost nothing.
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
    "Coordinator": "tinker_core.coordinator",
    "EpisodeResult": "tinker_core.coordinator",
    "Turn": "tinker_core.coordinator",
    "play_episode": "tinker_core.coordinator",
    "play_episode_async": "tinker_core.coordinator",
    "play_episodes": "tinker_core.coordinator",
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
    from tinker_core.coordinator import (
        Coordinator,
        EpisodeResult,
        Turn,
        play_episode,
        play_episode_async,
        play_episodes,
    )
    from tinker_env_games.board import BoardGameEnv
    from tinker_env_games.connect_four import ConnectFourEnv
    from tinker_env_games.guess_number import GuessNumberEnv
    from tinker_env_games.opponents import MinimaxAgent, RandomAgent
    from tinker_env_games.tictactoe import TicTacToeEnv
