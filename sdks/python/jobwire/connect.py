"""Connection settings from the environment, and the connection failures no reconnect can fix.

The variables are the ones the jobwire command and the Go library read (docs/security.md,
"Connecting from the environment").
"""

from __future__ import annotations

import os
import socket
import ssl
from typing import Any, Dict, Mapping, Optional

import grpc

ENV_ADDR = "JOBWIRE_ADDR"
ENV_TOKEN = "JOBWIRE_TOKEN"
ENV_TLS = "JOBWIRE_TLS"
ENV_TLS_CA = "JOBWIRE_TLS_CA"
ENV_TLS_CERT = "JOBWIRE_TLS_CERT"
ENV_TLS_KEY = "JOBWIRE_TLS_KEY"
ENV_TLS_SERVER_NAME = "JOBWIRE_TLS_SERVER_NAME"

DEFAULT_ADDR = "127.0.0.1:7070"

# How long the TLS probe of a broker that closed a connection may take.
PROBE_TIMEOUT = 5.0

KIND_TLS = "tls"
KIND_AUTH = "auth"


def settings_from_env(environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """The Worker keyword arguments the environment gives: address, token and the TLS options.

    Unset variables are left out, so the Worker's defaults apply.
    """
    env = os.environ if environ is None else environ
    out: Dict[str, Any] = {"address": env.get(ENV_ADDR) or DEFAULT_ADDR}
    for var, key in (
        (ENV_TOKEN, "token"),
        (ENV_TLS_CA, "tls_ca"),
        (ENV_TLS_CERT, "tls_cert"),
        (ENV_TLS_KEY, "tls_key"),
        (ENV_TLS_SERVER_NAME, "tls_server_name"),
    ):
        if env.get(var):
            out[key] = env[var]
    if env.get(ENV_TLS) == "true":
        out["tls"] = True
    return out


class ConnectError(grpc.aio.AioRpcError):
    """The worker cannot connect in a way that reconnecting would fix: a failed TLS handshake
    (kind "tls") or a token the broker refused (kind "auth").

    It is the stream's grpc.aio.AioRpcError (same code) with details saying what happened
    (problem) and what to change (fix); run() raises it instead of reconnecting.
    """

    def __init__(self, kind: str, problem: str, fix: str, cause: grpc.aio.AioRpcError):
        super().__init__(
            cause.code(),
            cause.initial_metadata(),
            cause.trailing_metadata(),
            details=f"{problem}; {fix}",
            debug_error_string=cause.debug_error_string(),
        )
        self.kind = kind
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return f"jobwire: {self.problem}; {self.fix}"


def classify_connect_error(
    err: grpc.aio.AioRpcError, address: str, tls: Optional[bool], client_cert: bool
) -> Optional[ConnectError]:
    """err as a ConnectError when no reconnect can fix it, else None (the broker is down or
    restarting, or the connection dropped).

    tls says whether the worker's channel is TLS (None: unknown, a channel_factory was given);
    client_cert whether it presents a client certificate. When the broker closed the connection
    without a word, a TLS probe of address tells a TLS broker from one that is not there.
    """
    code = err.code()
    msg = err.details() or ""
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return ConnectError(
            KIND_AUTH,
            f"the broker refused the token: {msg}",
            f"set {ENV_TOKEN} (token=) to a token the broker issued (jobwire tokens create)",
            err,
        )
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return ConnectError(
            KIND_AUTH,
            f"the token is not allowed this: {msg}",
            "use a token whose role and scope cover it (jobwire tokens create --role worker --types ...)",
            err,
        )
    if code != grpc.StatusCode.UNAVAILABLE:
        return None
    # gRPC's wording differs between releases (OpenSSL's "wrong version number" in 1.51,
    # BoringSSL's "WRONG_VERSION_NUMBER" later), so the words are compared without underscores.
    low = msg.lower().replace("_", " ")
    if "wrong version number" in low or "first record does not look like a tls handshake" in low:
        return ConnectError(
            KIND_TLS,
            "this worker connected with TLS but the broker does not serve TLS",
            f"start the broker with --tls-cert and --tls-key, or connect without TLS (unset {ENV_TLS}, "
            f"{ENV_TLS_CA}, {ENV_TLS_CERT} and {ENV_TLS_KEY})",
            err,
        )
    if "certificate verify failed" in low or "unable to get local issuer" in low:
        return ConnectError(
            KIND_TLS,
            f"the broker's certificate is not signed by a CA this worker trusts ({msg})",
            f"set {ENV_TLS_CA} (tls_ca=) to the CA certificate that signed the broker's certificate",
            err,
        )
    if "is not in peer certificate" in low or "hostname verification check failed" in low:
        return ConnectError(
            KIND_TLS,
            f"the broker's certificate does not name the address dialled ({msg})",
            f"connect by a name the certificate holds, or set {ENV_TLS_SERVER_NAME} (tls_server_name=) to one",
            err,
        )
    if "certificate required" in low or "alert bad certificate" in low or "alert unknown ca" in low:
        return _client_cert_error(err, client_cert)
    if "ssl handshake failed" in low or "handshake failed" in low:
        return ConnectError(
            KIND_TLS,
            f"the TLS handshake with the broker failed ({msg})",
            f"check the TLS settings ({ENV_TLS_CA}, {ENV_TLS_CERT}, {ENV_TLS_KEY}) against the broker's (docs/security.md)",
            err,
        )
    if "connection refused" in low or "dns resolution failed" in low:
        return None  # nothing listens there (yet): a broker that is starting
    # The broker closed the connection without a word: a TLS broker does that to a plaintext
    # client, and, after the handshake, to a client without the certificate it requires.
    if tls is None:
        return None
    probe = probe_tls(address, verdict=bool(tls) and not client_cert)
    if not tls and probe is not None:
        return ConnectError(
            KIND_TLS,
            "the broker serves TLS and this worker connected without it",
            f"set {ENV_TLS_CA} (tls_ca=) to the CA of the broker's certificate, or {ENV_TLS}=true (tls=True) "
            "if the system trusts it",
            err,
        )
    if tls and probe == "certificate required" and not client_cert:
        return _client_cert_error(err, client_cert)
    return None


def _client_cert_error(err: grpc.aio.AioRpcError, client_cert: bool) -> ConnectError:
    if not client_cert:
        return ConnectError(
            KIND_TLS,
            "the broker requires a client certificate (mutual TLS) and none was given",
            f"set {ENV_TLS_CERT} and {ENV_TLS_KEY} (tls_cert=, tls_key=) to a certificate signed by the CA "
            "the broker trusts",
            err,
        )
    return ConnectError(
        KIND_TLS,
        f"the broker refused this worker's client certificate ({err.details()})",
        "use a client certificate signed by the CA the broker trusts (its --tls-client-ca), and not expired",
        err,
    )


def probe_tls(address: str, timeout: float = PROBE_TIMEOUT, verdict: bool = False) -> Optional[str]:
    """Whether address answers a TLS handshake made without a client certificate: "tls", or
    None when it does not speak TLS or cannot be reached. With verdict, it also waits for the
    server's first bytes, and returns "certificate required" when the server refuses the
    connection instead (with TLS 1.3 a refused client certificate arrives after the handshake,
    as an alert or a closed connection). Nothing is sent once the handshake is done."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as raw:
            with ctx.wrap_socket(raw) as s:
                if not verdict:
                    return "tls"
                try:
                    if s.recv(1) == b"":
                        return "certificate required"
                except socket.timeout:
                    pass  # the server waits for the client: it accepted the connection
                except OSError:  # an alert (ssl.SSLError) or a reset
                    return "certificate required"
                return "tls"
    except ssl.SSLError as e:
        # With TLS 1.2 the refusal ends the handshake itself.
        if "CERTIFICATE_REQUIRED" in str(e).upper() or "HANDSHAKE_FAILURE" in str(e).upper():
            return "certificate required"
        return None
    except (OSError, ValueError):
        return None
