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


def test_gym_make_takes_render_mode_and_check_env_passes_on_the_made_env():
    code = (
        "import gymnasium as gym\n"
        "from gymnasium.utils.env_checker import check_env\n"
        "import tinker_env_math\n"
        "gym.register_envs(tinker_env_math)\n"
        "env = gym.make('math/arithmetic-v0', render_mode='ansi')\n"
        "assert env.render_mode == 'ansi'\n"
        "env.reset(seed=0)\n"
        "assert isinstance(env.render(), str)\n"
        "check_env(env.unwrapped)\n"
        "check_env(gym.make('math/arithmetic-v0', render_mode='ansi'))  # the made env itself (gymnasium warns it is wrapped)\n"
        "check_env(gym.make('math/arithmetic-v0').unwrapped)\n"
        "try:\n"
        "    gym.make('math/arithmetic-v0', render_mode='human')\n"
        "except ValueError as e:\n"
        "    assert \"render_modes are ['ansi']\" in str(e), e\n"
        "else:\n"
        "    raise AssertionError('an undeclared render_mode was accepted')\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
