"""HTTPS through the pinned address: the connection goes to the checked IP while TLS checks the
certificate for the URL's host (SNI and hostname verification), against a TLS server on loopback
with a certificate from a CA the test makes."""

import datetime as dt
import http.server
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sources import net
from sources.errors import SourceError

HOST = "docs.example.test"


def _certificates(folder):
    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (folder / "leaf.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "ca.pem", folder / "leaf.pem", folder / "leaf.key"


@pytest.fixture
def tls_site(tmp_path, monkeypatch, settings):
    ca, cert, key = _certificates(tmp_path)
    seen = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen["host"], seen["sni"] = self.headers["Host"], getattr(self.connection, "sni", None)
            body = b"<html><body>Over TLS.</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    def remember_sni(sock, name, _):
        sock.sni = name

    context.sni_callback = remember_sni
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    real = socket.getaddrinfo
    monkeypatch.setattr(
        net.socket,
        "getaddrinfo",
        lambda host, *a, **k: real("127.0.0.1" if host in (HOST, "other.example.test") else host, *a, **k),
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    settings.SOURCES_ALLOWED_HOSTS = [HOST, "other.example.test"]
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def test_https_verifies_the_certificate_for_the_urls_host(tls_site):
    port, seen = tls_site
    response = net.fetch(f"https://{HOST}:{port}/p")
    assert response.status == 200 and b"Over TLS." in response.body
    assert seen == {"host": f"{HOST}:{port}", "sni": HOST}


def test_a_certificate_for_another_host_is_refused(tls_site):
    port, _ = tls_site
    with pytest.raises(SourceError) as error:
        net.fetch(f"https://other.example.test:{port}/p")
    assert error.value.code == "fetch_failed" and "could not be fetched" in error.value.message
    assert "certificate" in error.value.message, error.value.message
