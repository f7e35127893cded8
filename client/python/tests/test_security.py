"""A secured server: TLS with client certificates required (mutual TLS) and
an access policy. The client reaches it with a CA, a client certificate and an
API key; each refusal arrives as its typed error. The certificates are signed
here, for this run, with the openssl command."""

from __future__ import annotations

import hashlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Server, run_server

import opreg

API_KEY = "py-secret-key"
IDENTITY = "spiffe://opreg.test/py-reader"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _issue(directory: Path, name: str, subject_alt_name: str) -> None:
    """``name.pem`` and ``name.key``, signed by the CA in ``directory``."""
    (directory / f"{name}.ext").write_text(f"subjectAltName={subject_alt_name}\n")
    _openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        f"/CN={name}",
        cwd=directory,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        f"{name}.ext",
        "-out",
        f"{name}.pem",
        cwd=directory,
    )


def _secured(directory: Path) -> dict[str, str]:
    pki = directory / "pki"
    pki.mkdir()
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=opreg pytest CA",
        cwd=pki,
    )
    _issue(pki, "server", "DNS:localhost,IP:127.0.0.1")
    _issue(pki, "client", f"URI:{IDENTITY}")
    policy = directory / "policy.toml"
    policy.write_text(
        f"""
[[principal]]
name = "py-worker"
api_key_sha256 = "{hashlib.sha256(API_KEY.encode()).hexdigest()}"
namespaces = ["py-*"]
roles = ["worker"]

[[principal]]
name = "py-reader"
tls_identity = "{IDENTITY}"
namespaces = ["py-*"]
roles = ["reader"]
"""
    )
    return {
        "OPREG_TLS_CERT": str(pki / "server.pem"),
        "OPREG_TLS_KEY": str(pki / "server.key"),
        "OPREG_TLS_CLIENT_CA": str(pki / "ca.pem"),
        "OPREG_AUTH_FILE": str(policy),
    }


@pytest.fixture(scope="module")
def secured() -> Iterator[Server]:
    yield from run_server(_secured)


def _pki(server: Server) -> Path:
    return Path(server.log).parent / "pki"


def _connect(server: Server, *, certificate: bool = True, api_key: str | None = None) -> opreg.Client:
    pki = _pki(server)
    return opreg.Client.connect(
        server.address,
        ca_certificate=(pki / "ca.pem").read_bytes(),
        client_certificate=(pki / "client.pem").read_bytes() if certificate else None,
        client_key=(pki / "client.key").read_bytes() if certificate else None,
        tls=True,
        api_key=api_key,
        timeout=5,
    )


@pytest.fixture
def namespace() -> str:
    return f"py-{uuid.uuid4().hex[:8]}"


def test_an_api_key_over_mutual_tls_is_the_worker(secured: Server, namespace: str) -> None:
    with _connect(secured, api_key=API_KEY) as client:
        claimed = client.claim(namespace, "k", owner="w", parameters={"a": 1})
        assert claimed.lease.fencing_token > 0
        with pytest.raises(opreg.PermissionDenied) as denied:
            client.claim("billing", "k", owner="w", parameters={"a": 1})
        assert (denied.value.principal, denied.value.namespace, denied.value.role) == ("py-worker", "billing", "worker")


def test_the_certificate_alone_is_the_reader(secured: Server, namespace: str) -> None:
    with _connect(secured) as client:
        with pytest.raises(opreg.OperationNotFound):
            client.lookup(namespace, "nothing")
        with pytest.raises(opreg.PermissionDenied) as denied:
            client.claim(namespace, "k", owner="w", parameters={"a": 1})
        assert (denied.value.principal, denied.value.role) == ("py-reader", "worker")


def test_a_wrong_key_is_unauthenticated(secured: Server, namespace: str) -> None:
    with _connect(secured, api_key="guessed") as client:
        with pytest.raises(opreg.Unauthenticated):
            client.lookup(namespace, "k")


def test_without_a_client_certificate_no_connection_is_made(secured: Server, namespace: str) -> None:
    with _connect(secured, certificate=False, api_key=API_KEY) as client:
        with pytest.raises(opreg.Unavailable):
            client.lookup(namespace, "k")
