"""TLS problems are named as TLS problems: the scheduler checks its certificate and key before binding."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tinker_core.proto import jobs_pb2_grpc, training_pb2_grpc
from tinker_scheduler import plugin
from tinker_scheduler.config import SchedulerConfig
from tinker_scheduler.server import GrpcServer, read_tls_pair

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _pair(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}-cert.pem", directory / f"{name}-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> tuple[tuple[Path, Path], tuple[Path, Path]]:
    directory = tmp_path_factory.mktemp("tls")
    return _pair(directory, "a"), _pair(directory, "b")


def test_a_good_pair_is_read(pairs):
    (cert, key), _ = pairs
    assert read_tls_pair(cert, key) == (cert.read_bytes(), key.read_bytes())


def test_swapped_files_are_named_as_swapped(pairs):
    (cert, key), _ = pairs
    with pytest.raises(ValueError, match=r"^tls_cert/tls_key: TLS certificate and key are swapped: ") as caught:
        read_tls_pair(key, cert)
    assert str(key) in str(caught.value) and str(cert) in str(caught.value)


def test_a_key_of_another_certificate_or_a_file_that_is_not_pem_is_a_tls_error(pairs, tmp_path):
    (cert, _), (_, other_key) = pairs
    with pytest.raises(ValueError, match=r"^tls_cert/tls_key: .* are not a TLS certificate chain and its private key"):
        read_tls_pair(cert, other_key)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not PEM\n")
    with pytest.raises(ValueError, match="are not a TLS certificate chain"):
        read_tls_pair(garbage, other_key)
    with pytest.raises(ValueError, match=r"^tls_key: cannot read the TLS file .*missing\.pem"):
        read_tls_pair(cert, tmp_path / "missing.pem")


def test_the_server_reports_a_swapped_pair_as_tls_not_as_a_port_in_use(pairs):
    (cert, key), _ = pairs
    config = SchedulerConfig(host="127.0.0.1", port=0, tls_cert=key, tls_key=cert)
    with pytest.raises(ValueError, match="TLS certificate and key are swapped"):
        GrpcServer(config, jobs=jobs_pb2_grpc.JobServiceServicer(), training=training_pb2_grpc.TrainingServiceServicer())


@pytest.mark.parametrize("swap", [True, False])
def test_scheduler_start_refuses_a_bad_pair_in_one_line_before_starting_anything(pairs, tmp_path, swap):
    (cert, key), (_, other_key) = pairs
    cert_arg, key_arg = (key, cert) if swap else (cert, other_key)
    root = typer.Typer()
    root.command()(lambda: None)
    plugin.opentinker_register_commands(cli=root)
    args = ["scheduler", "start", "--db", str(tmp_path / "jobs.db"), "--tls-cert", str(cert_arg), "--tls-key", str(key_arg)]
    result = CliRunner().invoke(root, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --tls-cert/--tls-key: "), result.stderr
    assert str(cert_arg) in lines[0] and str(key_arg) in lines[0] and "port" not in lines[0]
    assert not (tmp_path / "jobs.db").exists()  # refused before the store was opened
