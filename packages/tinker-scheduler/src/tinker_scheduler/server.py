"""The scheduler's gRPC server: JobService, TrainingService and standard health on one port.

Message limits (both ways) come from the config (``max_message_bytes``, default
:data:`tinker_core.proto.MAX_MESSAGE_BYTES`); with ``tls_cert``/``tls_key`` the server speaks
TLS only, after :func:`read_tls_pair` checked the pair. The servicers are built by the scheduler
and handed in.
"""

from __future__ import annotations

import ssl
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tinker_core.handshake import ServerHandshake
from tinker_core.proto import (
    JOB_SERVICE,
    TRAINING_SERVICE,
    jobs_pb2_grpc,
    message_size_options,
    training_pb2_grpc,
)
from tinker_scheduler.config import SchedulerConfig


def read_tls_pair(cert: Path, key: Path, names: tuple[str, str] = ("tls_cert", "tls_key")) -> tuple[bytes, bytes]:
    """The PEM certificate chain and private key, read and checked as a TLS pair.

    An unreadable file, a swapped pair, a file that is not PEM or a key that does not match the
    certificate is a one-line :class:`ValueError` naming the files by ``names`` (the options).
    """
    data = []
    for name, path in zip(names, (cert, key), strict=True):
        try:
            data.append(Path(path).read_bytes())
        except OSError as e:
            raise ValueError(f"{name}: cannot read the TLS file {path}: {e.strerror or e}") from None
    both = f"{names[0]}/{names[1]}"
    if b"PRIVATE KEY-----" in data[0] and b"CERTIFICATE-----" in data[1]:
        raise ValueError(
            f"{both}: TLS certificate and key are swapped: {cert} holds a private key and {key} a certificate; "
            "pass them the other way round"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key, password=lambda: b"")  # an encrypted key fails, it cannot prompt
    except ssl.SSLError as e:
        raise ValueError(
            f"{both}: {cert} and {key} are not a TLS certificate chain and its private key in PEM "
            f"({e.reason or e}); check the key matches the certificate and is not encrypted"
        ) from None
    return data[0], data[1]


class GrpcServer:
    """A started server bound to ``config.host:config.port`` (:attr:`port` is the bound port)."""

    def __init__(self, config: SchedulerConfig, *, jobs: Any, training: Any) -> None:
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.max_workers, thread_name_prefix="opentinker-grpc"),
            # a port in use is an error, not a shared port; tensors travel in TrainingService messages
            options=[("grpc.so_reuseport", 0), *message_size_options(config.max_message_bytes)],
            # every call answers with the scheduler's versions; a client of another wire MAJOR is refused
            interceptors=[ServerHandshake("scheduler", "tinker-scheduler")],
        )
        jobs_pb2_grpc.add_JobServiceServicer_to_server(jobs, self._server)
        training_pb2_grpc.add_TrainingServiceServicer_to_server(training, self._server)
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        bind = f"{config.host}:{config.port}"
        credentials = None
        if config.tls_cert is not None and config.tls_key is not None:
            cert, key = read_tls_pair(config.tls_cert, config.tls_key)  # a TLS problem is not a port problem
            credentials = grpc.ssl_server_credentials([(key, cert)])
        try:
            if credentials is not None:
                port = self._server.add_secure_port(bind, credentials)
            else:
                port = self._server.add_insecure_port(bind)
        except RuntimeError:
            port = 0
        if not port:
            raise OSError(f"could not bind the gRPC server to {bind}; is the port in use? pass another --port")
        self.port = int(port)
        self._server.start()
        for name in ("", JOB_SERVICE, TRAINING_SERVICE):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def enter_graceful_shutdown(self) -> None:
        """Health checks answer NOT_SERVING from now on."""
        self._health.enter_graceful_shutdown()

    def stop(self, grace: float = 2.0) -> None:
        self._server.stop(grace=grace).wait()

    def wait_for_termination(self) -> None:
        self._server.wait_for_termination()
