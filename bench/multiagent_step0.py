"""The step-0 held-out evaluation of a multi-agent GRPO job (``opentinker eval`` plays
single-agent envs only): its base model, greedy, against the stage's ``eval_opponent``, on the
same fixed eval seeds and settings as the job's own evaluations (``evaluate_multi_agent`` with
``seed = derive_seed(job.seed, "eval")``). In ``learners`` mode every role's adapter starts as the
base model, so this is each role's start.

    uv run python bench/multiagent_step0.py examples/tictactoe-learners.yaml --seed 0 -o step0.json
"""

from __future__ import annotations

import argparse
import json

import tinker_core
from tinker_algos.models import PolicyModel
from tinker_algos.multiagent.grpo import evaluate_multi_agent
from tinker_algos.prompts import PromptRenderer
from tinker_core.config import load_config
from tinker_core.seeding import derive_seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--seed", type=int, default=None, help="the job's seed (default: the config's)")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    job = load_config(args.config)
    seed = job.seed if args.seed is None else args.seed
    (stage,) = job.resolved_stages()
    env = stage.env
    assert env is not None
    kwargs = env.eval_kwargs if env.eval_kwargs is not None else env.kwargs
    ma = stage.algorithm.params.multi_agent
    if job.model.threads:
        import torch

        torch.set_num_threads(job.model.threads)
    policy = PolicyModel.load(job.model.name, tokenizer=job.model.tokenizer, revision=job.model.revision)
    policy.model.eval()
    renderer = PromptRenderer.from_config(policy.tokenizer, job.model.chat_template)
    renderer = renderer.with_system_prompt(env.system_prompt)
    r = stage.rollout
    metrics = evaluate_multi_agent(
        policy, lambda: tinker_core.make_env(env.id, **kwargs), stage.algorithm.eval_size,
        seed=derive_seed(seed, "eval"), max_new_tokens=r.max_new_tokens, stop=r.stop,
        opponent_name=ma.eval_opponent or ma.opponent, turn_timeout_s=r.turn_timeout_s, max_steps=r.max_turns,
        renderer=renderer,
    )
    with open(args.output, "w") as f:
        json.dump({"config": args.config, "seed": seed, "step": 0, "metrics": metrics}, f, indent=1)
    print(json.dumps(metrics, indent=1))


if __name__ == "__main__":
    main()
