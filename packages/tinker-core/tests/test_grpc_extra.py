"""tinker-core without its `grpc` extra: what an env author installs (no grpcio, no protobuf)."""

from __future__ import annotations

import subprocess
import sys

# Runs in a fresh interpreter where grpc and protobuf cannot be imported (a None entry in
# sys.modules makes `import` raise ImportError), as when they are not installed.
BLOCK = "import sys\nfor m in ('grpc', 'grpc_health', 'google.protobuf'): sys.modules[m] = None\n"


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True, timeout=120)


def test_an_env_author_needs_neither_grpc_nor_protobuf():
    code = (
        "import tinker_core, tinker_core.registry, tinker_core.config, tinker_core.coordinator\n"
        "from tinker_core.testing import check_env\n"
        "from tinker_core import EnvSpec, TextEnv\n"
        "class One(TextEnv):\n"
        "    env_spec = EnvSpec(id='t/one-v0', description='say 1', max_turns=1)\n"
        "    def reset(self, *, seed=None, options=None):\n"
        "        super().reset(seed=seed)\n"
        "        return '1?', {}\n"
        "    def step(self, action):\n"
        "        return '', float(action == '1'), True, False, {}\n"
        "check_env(One)\n"
        "print('ok')\n"
    )
    result = run(code)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_remote_envs_without_the_extra_name_the_install_command():
    result = run("import tinker_core.remote\n")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: tinker_core.remote (envs over gRPC) needs grpcio and protobuf"), last
    assert last.endswith(": pip install 'tinker-core[grpc]'"), last
