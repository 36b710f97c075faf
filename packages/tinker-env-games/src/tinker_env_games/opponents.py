"""Opponents that need no model, usable wherever an agent is: ``agent(role, observation) -> str``.

Each lives with its game and is offered by the game's env class in ``scripted_opponents`` (the
contract of :mod:`tinker_core.opponents`); this module gathers them for direct use:

- :class:`RandomAgent` (:mod:`tinker_env_games.board`) plays a uniformly random move from the
  ``Legal moves:`` line of any board game in this package (seeded).
- :class:`MinimaxAgent` (:mod:`tinker_env_games.tictactoe`) plays perfect tic-tac-toe;
  :class:`MixedAgent` a perfect move half the time, a random one otherwise.
- :class:`RandomNegotiator`, :class:`ConcederAgent`, :class:`BoulwareAgent`
  (:mod:`tinker_env_games.negotiators`) negotiate in ``games/negotiation-v0``.
- :class:`LiteralPartner`, :class:`RandomPartner` (:mod:`tinker_env_games.reference_game`) play
  either role of ``games/reference-v0``.
"""

from __future__ import annotations

from tinker_env_games.board import RandomAgent, legal_moves_in
from tinker_env_games.negotiators import BoulwareAgent, ConcederAgent, RandomNegotiator
from tinker_env_games.reference_game import LiteralPartner, RandomPartner
from tinker_env_games.tictactoe import MinimaxAgent, MixedAgent, minimax_moves, minimax_value

__all__ = [
    "BoulwareAgent",
    "ConcederAgent",
    "LiteralPartner",
    "MinimaxAgent",
    "MixedAgent",
    "RandomAgent",
    "RandomNegotiator",
    "RandomPartner",
    "legal_moves_in",
    "minimax_moves",
    "minimax_value",
]
