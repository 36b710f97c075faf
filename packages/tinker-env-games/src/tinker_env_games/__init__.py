"""tinker-env-games: OpenTinker environment plugin for multi-turn and two-player games.

Registers ``games/guess-number-v0``, ``games/tictactoe-v0``, ``games/connect-four-v0``,
``games/negotiation-v0`` (a dialogue game) and ``games/reference-v0`` (a cooperative game) (see
:mod:`tinker_env_games.plugin`), and provides opponents that need no model
(:mod:`tinker_env_games.opponents`; the multi-agent games offer them by name in
``scripted_opponents``). The multi-agent episode coordinator is tinker-core's
(``from tinker_core import play_episode``). Names below load on first use, so plugin discovery, which imports the package, stays cheap; importing it
yourself registers its envs with gymnasium (:mod:`tinker_core.gymnasium_envs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_core import lazy_package, register_package

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - read by lazy_package too
    from tinker_env_games.board import BoardGameEnv as BoardGameEnv
    from tinker_env_games.connect_four import ConnectFourEnv as ConnectFourEnv
    from tinker_env_games.guess_number import GuessNumberEnv as GuessNumberEnv
    from tinker_env_games.negotiation import NegotiationEnv as NegotiationEnv
    from tinker_env_games.negotiators import BoulwareAgent as BoulwareAgent
    from tinker_env_games.negotiators import ConcederAgent as ConcederAgent
    from tinker_env_games.negotiators import RandomNegotiator as RandomNegotiator
    from tinker_env_games.opponents import MinimaxAgent as MinimaxAgent
    from tinker_env_games.opponents import RandomAgent as RandomAgent
    from tinker_env_games.reference_game import LiteralPartner as LiteralPartner
    from tinker_env_games.reference_game import RandomPartner as RandomPartner
    from tinker_env_games.reference_game import ReferenceGameEnv as ReferenceGameEnv
    from tinker_env_games.tictactoe import TicTacToeEnv as TicTacToeEnv

__getattr__, __dir__, __all__ = lazy_package(__name__, "__version__")

register_package(__name__)  # gymnasium.make("<env id>") works after `import tinker_env_games`
