"""Environments served over gRPC: :func:`serve_env` and the clients :class:`RemoteEnv`,
:class:`RemoteMultiAgentEnv`.

A server runs registered environments (anything :func:`tinker_core.make_env` builds) for many
clients at once. Each client session owns one env instance, isolated from every other; a
session is closed by its client, or by the server once it has been idle for ``idle_timeout_s``;
the server holds at most ``max_sessions`` at a time. The standard gRPC health service reports
``SERVING`` for ``""`` and ``"opentinker.v1.EnvService"``::

    server = serve_env("echo/echo-v0", port=50051)   # returns at once; serves in threads
    server.wait_for_termination()                    # a CLI blocks here (Ctrl-C: server.stop())

    with RemoteEnv("127.0.0.1:50051", "echo/echo-v0") as env:   # elsewhere
        obs, info = env.reset(seed=0)                # exactly what the local env returns
        obs, reward, terminated, truncated, info = env.step("apple")

What changes over the wire: ``info`` dicts and reset options travel as JSON (tuples come back as
lists, numpy scalars as Python numbers), rewards come back as ``float``, and ``Step`` before the
first ``Reset`` of a session fails (``FAILED_PRECONDITION``) as gymnasium's order checks do.

One request cannot freeze the server (:class:`ServerLimits`): actions and responses have size
limits checked before any work, and each env call runs in a thread the server abandons after its
call timeout or the client's deadline (closing that session), so ``stop()`` returns whatever an
env is doing.

Modules: :mod:`.codec` (JSON fields and observations in messages), :mod:`.guard` (limits and
abandonable env calls), :mod:`.sessions` (the session table), :mod:`.servicer` (the
``EnvService`` RPCs), :mod:`.server` (:func:`serve_env`, :class:`EnvServer`),
:mod:`.client` (:class:`RemoteEnv`, :class:`RemoteMultiAgentEnv`, :class:`RemoteEnvError`).
This package imports grpc, which the extra ``tinker-core[grpc]`` installs (tinker-client,
tinker-algos and tinker-scheduler depend on it); ``import tinker_core`` does not import it.
"""

from __future__ import annotations

try:
    import google.protobuf
    import grpc
    import grpc_health
except ImportError as e:  # an env author's install: tinker-core without its wire protocol
    raise ImportError(
        f"tinker_core.remote (envs over gRPC) needs grpcio and protobuf ({e}): pip install 'tinker-core[grpc]'",
        name=e.name,
    ) from e
from tinker_core.proto import ENV_SERVICE as SERVICE_NAME
from tinker_core.proto import MAX_MESSAGE_BYTES
from tinker_core.remote.client import (
    RemoteEnv,
    RemoteEnvError,
    RemoteEnvInvalidArgument,
    RemoteEnvNotFound,
    RemoteMultiAgentEnv,
)
from tinker_core.remote.codec import observation_from_proto, observation_to_proto
from tinker_core.remote.guard import ServerLimits
from tinker_core.remote.server import EnvServer, serve_env

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SERVICE_NAME",
    "EnvServer",
    "RemoteEnv",
    "RemoteEnvError",
    "RemoteEnvInvalidArgument",
    "RemoteEnvNotFound",
    "RemoteMultiAgentEnv",
    "ServerLimits",
    "observation_from_proto",
    "observation_to_proto",
    "serve_env",
]
