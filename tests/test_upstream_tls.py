"""``--upstream-ca FILE`` and ``--upstream-insecure`` (issue 15): a real TLS
upstream whose certificate comes from a private CA made here, reached through
``modeltap run`` (reverse and regular mode), the pytest fixture and two
proxies side by side."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modeltap.app.proxy import Proxy, ProxyConfig
from modeltap.app.upstream_tls import read_ca_file, trust_bundle
from tests.cli_process import CliProcess, run_cli
from tests.conftest import read_jsonl
from tests.test_startup import only_line
from tests.upstream import Upstream

pytest_plugins = ["pytester"]

MESSAGES = [{"role": "user", "content": "x"}]


_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
    encipher_only=False, decipher_only=False,
)  # fmt: skip


@dataclass
class PrivateCa:
    """A CA of our own and a server certificate for 127.0.0.1 it signed."""

    ca_file: Path
    server: ssl.SSLContext


def make_private_ca(where: Path) -> PrivateCa:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modeltap test private CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_CA_KEY_USAGE, critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = where / "private-ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain, key_file = where / "server.pem", where / "server.key"
    chain.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(chain, key_file)
    return PrivateCa(ca_file, server)


@pytest.fixture
def private_ca(tmp_path: Path) -> PrivateCa:
    return make_private_ca(tmp_path)


@pytest.fixture
def tls_upstream(private_ca: PrivateCa) -> Upstream:
    with Upstream(tls=private_ca.server) as stub:
        yield stub  # type: ignore[misc]


def chat(base_url: str, model: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
    client.chat.completions.create(model=model, messages=MESSAGES)


# --------------------------------------------------------------------------
# modeltap run, reverse mode


def test_a_private_ca_is_trusted_with_upstream_ca(
    tmp_path: Path, private_ca: PrivateCa, tls_upstream: Upstream
) -> None:
    out = tmp_path / "out"
    route = f"vllm={tls_upstream.url}"
    with CliProcess("run", "--out", str(out), "--route", route) as plain:
        with pytest.raises(openai.InternalServerError):  # not trusted: never reached
            chat(f"{plain.url}/vllm/v1", "untrusted")
        assert plain.wait_for_line(lambda line: " untrusted " in line).endswith(
            "upstream unreachable"
        )
    assert tls_upstream.received == []

    ca = str(private_ca.ca_file)
    with CliProcess("run", "--out", str(out), "--route", route, "--upstream-ca", ca) as cli:
        assert f"  upstream   TLS verified against the public roots and {ca}" in cli.screen
        chat(f"{cli.url}/vllm/v1", "trusted")
    assert [r.path for r in tls_upstream.received] == ["/v1/chat/completions"]
    records = read_jsonl(out / "audit.jsonl")
    assert [(r["model"], r["upstream"]) for r in records] == [
        ("untrusted", tls_upstream.url),
        ("trusted", tls_upstream.url),
    ]
    assert len(read_jsonl(out / "sessions.jsonl")) == 2  # so the check below reads some
    assert all(s["upstream_insecure"] is False for s in read_jsonl(out / "sessions.jsonl"))


def test_upstream_insecure_works_and_says_so_loudly(tmp_path: Path, tls_upstream: Upstream) -> None:
    route = f"vllm={tls_upstream.url}"
    with CliProcess(
        "run", "--out", str(tmp_path), "--route", route, "--upstream-insecure", "--session", "s"
    ) as cli:
        assert "  WARNING    upstream TLS NOT VERIFIED (--upstream-insecure)" in cli.screen
        chat(f"{cli.url}/vllm/v1", "insecure")
    (session,) = read_jsonl(tmp_path / "sessions.jsonl")
    assert (session["session_id"], session["upstream_insecure"]) == ("s", True)
    assert len(tls_upstream.received) == 1


# --------------------------------------------------------------------------
# modeltap run, regular mode


def test_regular_mode_trusts_the_private_ca_too(
    tmp_path: Path, private_ca: PrivateCa, tls_upstream: Upstream
) -> None:
    # mitmproxy's own CA (which the agent trusts in regular mode) goes under HOME.
    env = {"HOME": str(tmp_path)}
    route = f"vllm={tls_upstream.url}"
    ca = str(private_ca.ca_file)
    with CliProcess(
        "run", "--mode", "regular", "--out", str(tmp_path / "out"), "--route", route,
        "--upstream-ca", ca, env=env,
    ) as cli:  # fmt: skip
        mitm_ca = tmp_path / ".mitmproxy" / "mitmproxy-ca-cert.pem"
        client = httpx.Client(proxy=cli.url, verify=ssl.create_default_context(cafile=mitm_ca))
        with client:
            resp = client.post(
                f"{tls_upstream.url}/v1/chat/completions",
                json={"model": "regular", "messages": MESSAGES},
                timeout=30,
            )
        assert resp.status_code == 200, resp.text
    (record,) = read_jsonl(tmp_path / "out" / "audit.jsonl")
    assert (record["model"], record["route"]) == ("regular", "vllm")


# --------------------------------------------------------------------------
# Checked at start


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read it: No such file or directory"),
        (b"not a certificate\n", "no PEM certificate in it"),
        (
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            "a certificate in it cannot be loaded",
        ),
    ],
)
def test_a_bad_ca_file_stops_the_start(tmp_path: Path, content: bytes | None, reason: str) -> None:
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_bytes(content)
    done = run_cli(
        "run", "--listen", "127.0.0.1:0", "--out", str(tmp_path), "--upstream-ca", str(ca)
    )
    assert done.returncode == 1
    assert only_line(done.stderr).startswith(f"modeltap: --upstream-ca {ca}: {reason}")


def test_both_options_at_once_are_refused(tmp_path: Path, private_ca: PrivateCa) -> None:
    done = run_cli(
        "run", "--listen", "127.0.0.1:0", "--out", str(tmp_path),
        "--upstream-ca", str(private_ca.ca_file), "--upstream-insecure",
    )  # fmt: skip
    assert done.returncode == 1
    assert "contradict each other" in only_line(done.stderr)


def test_the_bundle_keeps_the_public_roots(private_ca: PrivateCa) -> None:
    import certifi

    extra = read_ca_file(str(private_ca.ca_file))
    bundle = trust_bundle(Path(certifi.where()).read_bytes(), extra)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=bundle.decode())
    public = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    public.load_verify_locations(certifi.where())
    assert context.cert_store_stats()["x509_ca"] == public.cert_store_stats()["x509_ca"] + 1


# --------------------------------------------------------------------------
# The fixture, and two proxies in one process


def test_the_fixture_takes_the_options(
    pytester: pytest.Pytester, private_ca: PrivateCa, tls_upstream: Upstream
) -> None:
    pytester.makepyfile(
        f"""
        import openai
        import pytest


        @pytest.mark.modeltap(route=["vllm={tls_upstream.url}"], upstream_ca="{private_ca.ca_file}")
        def test_private_ca(modeltap):
            client = openai.OpenAI(
                base_url=modeltap.base_url("vllm") + "/v1", api_key="k", max_retries=0
            )
            client.chat.completions.create(model="m", messages=[])


        @pytest.mark.modeltap(**{{"upstream-ca": "/no/such/ca.pem"}})
        def test_missing_ca(modeltap):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:hypothesispytest")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*modeltap did not start: --upstream-ca /no/such/ca.pem: cannot read it: No such file*"]
    )


def test_two_proxies_keep_their_own_tls_settings(
    tmp_path: Path, private_ca: PrivateCa, tls_upstream: Upstream
) -> None:
    route = [f"vllm={tls_upstream.url}"]
    trusting = Proxy(
        ProxyConfig(
            listen_port=0, out=str(tmp_path / "a"), routes=route, quiet=True,
            upstream_ca=str(private_ca.ca_file),
        )
    )  # fmt: skip
    plain = Proxy(ProxyConfig(listen_port=0, out=str(tmp_path / "b"), routes=route, quiet=True))
    with trusting, plain:
        chat(f"{trusting.url}/vllm/v1", "a")
        with pytest.raises(openai.InternalServerError):
            chat(f"{plain.url}/vllm/v1", "b")
        chat(f"{trusting.url}/vllm/v1", "a")
    assert len(tls_upstream.received) == 2
