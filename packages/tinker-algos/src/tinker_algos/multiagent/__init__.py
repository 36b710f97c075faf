"""Multi-agent rollouts: a policy plays the roles of turn-based games, one trajectory per role.

The modules, one job each:

- :mod:`~tinker_algos.multiagent.roles` -- who plays a role: :class:`Learner` (the policy, with
  an adapter), :class:`Scripted` (an agent that is not trained), :func:`opponent` (a scripted
  opponent the env offers by name, see :mod:`tinker_core.opponents`);
- :mod:`~tinker_algos.multiagent.rollout` -- :func:`multi_agent_rollout`: episodes through
  tinker-core's coordinator, learner turns through the turn FSM (the full story is there);
- :mod:`~tinker_algos.multiagent.episode` -- one episode's players and the trajectories it leaves;
- :mod:`~tinker_algos.multiagent.batcher` -- learner requests sampled in deterministic rounds;
- :mod:`~tinker_algos.multiagent.guarded_env` -- env calls under a timeout, failures as episode errors;
- :mod:`~tinker_algos.multiagent.results` -- :class:`MultiAgentRolloutResult` and its metrics;
- :mod:`~tinker_algos.multiagent.params` -- :class:`MultiAgentParams` (``algorithm.params.multi_agent``);
- :mod:`~tinker_algos.multiagent.grpo` -- what GRPO calls: :func:`collect_for_grpo`,
  :func:`evaluate_multi_agent`, :func:`evaluate_stage` (every stage's held-out
  evaluation on an env with roles), :func:`stage_env_spec`;
- :mod:`~tinker_algos.algorithms.learners` -- ``mode: learners``: one adapter, trainer and loss per
  role (imported by GRPO from there: it builds on the algorithms' update block);
- :mod:`~tinker_algos.algorithms.league` -- ``mode: league``: a pool of the policy's past
  snapshots (and scripted opponents) to play, and the Elo rating of held-out evaluation.

This package imports no env package: the coordinator is tinker-core's, and named opponents come
from the env being played.
"""

from __future__ import annotations

from tinker_algos.multiagent.grpo import (
    collect_for_grpo,
    env_spec_of,
    evaluate_multi_agent,
    evaluate_opponents,
    evaluate_stage,
    held_out_keys,
    stage_env_spec,
)
from tinker_algos.multiagent.params import MultiAgentParams
from tinker_algos.multiagent.results import MultiAgentEpisode, MultiAgentRolloutResult
from tinker_algos.multiagent.roles import Agent, Learner, Opponent, RoleSpec, Scripted, opponent
from tinker_algos.multiagent.rollout import multi_agent_rollout

__all__ = [
    "Agent",
    "Learner",
    "MultiAgentEpisode",
    "MultiAgentParams",
    "MultiAgentRolloutResult",
    "Opponent",
    "RoleSpec",
    "Scripted",
    "collect_for_grpo",
    "env_spec_of",
    "evaluate_multi_agent",
    "evaluate_opponents",
    "evaluate_stage",
    "held_out_keys",
    "multi_agent_rollout",
    "opponent",
    "stage_env_spec",
]
