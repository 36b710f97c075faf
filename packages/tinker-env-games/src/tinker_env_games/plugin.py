"""The ``opentinker`` entry point of tinker-env-games.

``pyproject.toml`` names this module under ``[project.entry-points.opentinker]``; OpenTinker
imports it on first registry access and calls the hook below. The env modules are imported
inside the hook, so discovering the plugin stays cheap.
"""

from __future__ import annotations

from tinker_core import EnvRegister, hookimpl


@hookimpl
def opentinker_register_envs(register: EnvRegister) -> None:
    """Register ``games/guess-number-v0``, ``games/tictactoe-v0``, ``games/connect-four-v0``,
    ``games/negotiation-v0`` and ``games/reference-v0``."""
    from tinker_env_games.connect_four import CONNECT_FOUR_SPEC, ConnectFourEnv
    from tinker_env_games.guess_number import GUESS_NUMBER_SPEC, GuessNumberEnv
    from tinker_env_games.negotiation import NEGOTIATION_SPEC, NegotiationEnv
    from tinker_env_games.reference_game import REFERENCE_SPEC, ReferenceGameEnv
    from tinker_env_games.tictactoe import TICTACTOE_SPEC, TicTacToeEnv

    register(GUESS_NUMBER_SPEC, GuessNumberEnv)
    register(TICTACTOE_SPEC, TicTacToeEnv)
    register(CONNECT_FOUR_SPEC, ConnectFourEnv)
    register(NEGOTIATION_SPEC, NegotiationEnv)
    register(REFERENCE_SPEC, ReferenceGameEnv)
