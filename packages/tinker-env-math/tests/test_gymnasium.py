"""The math envs are gymnasium envs: ``gym.make("math/arithmetic-v0")`` after ``import tinker_env_math``."""

from __future__ import annotations

import os
import subprocess
import sys


def test_gym_make_builds_the_arithmetic_env_with_its_keyword_arguments():
    code = (
        "import gymnasium as gym\n"
        "import tinker_env_math\n"
        "gym.register_envs(tinker_env_math)\n"
        "env = gym.make('math/arithmetic-v0', digits=1)\n"
        "obs, info = env.reset(seed=0)\n"
        "assert env.unwrapped.env_spec.id == 'math/arithmetic-v0' and len(info['answer']) <= 2, (obs, info)\n"
        "_, reward, terminated, _, _ = env.step(info['answer'])\n"
        "assert terminated and reward == 1.0\n"
        "assert {'math/calculator-v0', 'math/dataset-v0'} <= set(gym.registry)\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
