"""Temporal connection settings read the way the `temporal` CLI reads them (envconfig).

The dev server cannot serve TLS itself, so the TLS test puts a real TLS endpoint (a
self-signed certificate, HTTP/2 by ALPN) in front of it and connects through that.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.service import TLSConfig
from temporalio.testing import WorkflowEnvironment

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import ServiceUnreachable, SetupError
from agentledger.core.temporal_connection import connect_options, describe
from agentledger.temporal.client import connect

CLOUD = {
    "TEMPORAL_ADDRESS": "payments.a1b2c.tmprl.cloud:7233",
    "TEMPORAL_NAMESPACE": "payments.a1b2c",
    "TEMPORAL_API_KEY": "cloud-api-key-secret",
}


def test_temporal_cloud_variables_make_an_api_key_tls_connection() -> None:
    settings = AgentLedgerConfig.load(CLOUD)
    assert settings.temporal_address == CLOUD["TEMPORAL_ADDRESS"]
    assert settings.temporal_namespace == CLOUD["TEMPORAL_NAMESPACE"]
    options = connect_options(settings.temporal_profile)
    assert options["api_key"] == "cloud-api-key-secret"
    assert options["tls"] is True  # an API key turns TLS on, as Temporal Cloud needs
    assert "cloud-api-key-secret" not in repr(settings)
    assert "secret" not in describe(
        settings.temporal_address, settings.temporal_namespace, settings.temporal_profile
    )


def test_profile_from_the_cli_toml_file_and_env_over_it(tmp_path: Path) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.prod]\naddress = "prod.example:7233"\nnamespace = "prod"\n'
        '[profile.prod.tls]\nserver_name = "prod.example"\n'
    )
    env = {"TEMPORAL_CONFIG_FILE": str(config), "TEMPORAL_PROFILE": "prod"}
    settings = AgentLedgerConfig.load(env)
    assert (settings.temporal_address, settings.temporal_namespace) == ("prod.example:7233", "prod")
    tls = connect_options(settings.temporal_profile)["tls"]
    assert isinstance(tls, TLSConfig) and tls.domain == "prod.example"
    overridden = AgentLedgerConfig.load({**env, "TEMPORAL_NAMESPACE": "staging"})
    assert overridden.temporal_namespace == "staging"


def test_no_variables_mean_the_local_stack(tmp_path: Path) -> None:
    settings = AgentLedgerConfig.load(
        {"AGENTLEDGER_HOME": str(tmp_path), "TEMPORAL_CONFIG_FILE": "/nonexistent"}
    )
    assert (settings.temporal_address, settings.temporal_namespace) == ("localhost:7233", "default")
    assert connect_options(settings.temporal_profile) == {}


async def test_unreadable_tls_file_is_a_setup_error(tmp_path: Path) -> None:
    """Named where the settings load, before anything connects."""
    with pytest.raises(SetupError, match="TEMPORAL_TLS_SERVER_CA_CERT_PATH"):
        AgentLedgerConfig.load(
            {
                "TEMPORAL_ADDRESS": "127.0.0.1:1",
                "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(tmp_path / "missing-ca.pem"),
            }
        )


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def self_signed(folder: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA, and a server certificate for localhost/127.0.0.1 it signs: PEM files
    (CA certificate, server certificate, server key)."""
    now = datetime.datetime.now(datetime.UTC)

    def certificate(
        subject: str,
        key: ec.EllipticCurvePrivateKey,
        issuer: str,
        signer: ec.EllipticCurvePrivateKey,
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    ca_key, server_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = (
        certificate("agentledger test CA", ca_key, "agentledger test CA", ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        certificate("localhost", server_key, "agentledger test CA", ca_key)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(pem_key(server_key))
    return paths


@asynccontextmanager
async def tls_front(target: str, cert: Path, key: Path) -> AsyncIterator[str]:
    """A TLS endpoint (HTTP/2 by ALPN) that passes bytes through to the plain `target`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    host, _, port = target.rpartition(":")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_tls_with_a_self_signed_server_certificate(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    ca, cert, key = self_signed(tmp_path)
    async with tls_front(env.client.service_client.config.target_host, cert, key) as address:
        trusted = AgentLedgerConfig.load(
            {
                "TEMPORAL_ADDRESS": address,
                "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(ca),
                "TEMPORAL_TLS_SERVER_NAME": "localhost",
            }
        )
        client = await connect(trusted)
        info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        assert info.server_version
        untrusted = AgentLedgerConfig.load({"TEMPORAL_ADDRESS": address, "TEMPORAL_TLS": "true"})
        with pytest.raises(ServiceUnreachable, match="cannot reach Temporal"):
            await connect(untrusted)
