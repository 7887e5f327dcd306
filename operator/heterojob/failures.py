"""What went wrong with a call to a member's API server or a Prometheus, in words for people.

The clients raise urllib3's and requests' exceptions, whose text is a wall of pool and retry internals
(`HTTPConnectionPool(host=..., port=...): Max retries exceeded with url: ... (Caused by NewConnectionError(
...))`). `describe` walks the exception's chain (requests wraps urllib3's MaxRetryError, which carries the
real reason) and says what happened: timed out after N s, connection refused, the host name does not
resolve, TLS failed, refused the credentials (401), forbidden (403), answered HTTP N. Shapes checked
against urllib3 2.8, requests 2.34, kubernetes 37 and prometheus-api-client 0.7 (a client pointed at a
closed port, a port that never answers, https against a plain-HTTP server, a server answering 401).
The caller keeps the full exception for its log.
"""

from __future__ import annotations

import re
import socket
import ssl

import requests
import urllib3.exceptions as u3

_HTTP_STATUS = re.compile(r"HTTP Status Code (\d{3})")  # prometheus-api-client's PrometheusApiClientException
_WORDS = {401: "refused the credentials (HTTP 401)", 403: "forbids it (HTTP 403)",
          404: "has no such API (HTTP 404)"}


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what it wraps: MaxRetryError.reason, requests' args[0], __cause__/__context__."""
    out: list[BaseException] = []
    todo = [exc]
    while todo and len(out) < 12:
        e = todo.pop(0)
        if e in out:
            continue
        out.append(e)
        reason = getattr(e, "reason", None)
        if isinstance(reason, BaseException):
            todo.append(reason)
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
    return out


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an answer carried (kubernetes ApiException, requests HTTPError, Prometheus client)."""
    for e in _chain(exc):
        status = getattr(e, "status", None)
        if isinstance(status, int) and 100 <= status < 600:
            return status
        code = getattr(getattr(e, "response", None), "status_code", None)
        if isinstance(code, int):
            return code
        m = _HTTP_STATUS.search(str(e)) if type(e).__name__ == "PrometheusApiClientException" else None
        if m:
            return int(m.group(1))
    return None


def describe(exc: BaseException, timeout_s: float | None = None) -> str:
    """One short sentence fragment: what happened to the call (no host, no credentials, no stack)."""
    status = http_status(exc)
    if status is not None:
        return _WORDS.get(status, f"answered HTTP {status}")
    chain = _chain(exc)
    after = f" after {timeout_s:g} s" if timeout_s else ""
    for e in chain:
        if isinstance(e, (u3.SSLError, ssl.SSLError, requests.exceptions.SSLError)):
            text = " ".join(str(x) for x in chain)
            if "CERTIFICATE_VERIFY_FAILED" in text:
                return "TLS failed: the server's certificate is not trusted (check the CA in the kubeconfig or URL)"
            if "WRONG_VERSION_NUMBER" in text:
                return "TLS failed: the server does not speak TLS there (http:// instead of https://?)"
            return "TLS failed (handshake refused)"
    for e in chain:  # before timeouts: urllib3's NewConnectionError is a ConnectTimeoutError subclass
        if isinstance(e, u3.NameResolutionError) or isinstance(e, socket.gaierror):
            return "its host name does not resolve"
        if isinstance(e, ConnectionRefusedError) or "Connection refused" in str(e):
            return "connection refused (nothing listens there)"
    for e in chain:
        if isinstance(e, (u3.ConnectTimeoutError, u3.ReadTimeoutError, requests.Timeout, socket.timeout,
                          TimeoutError)):
            return f"timed out{after}"
    for e in chain:
        if isinstance(e, (u3.ProtocolError, ConnectionResetError, ConnectionAbortedError)) \
                or type(e).__name__ == "RemoteDisconnected":
            return "the connection was closed before an answer"
    for e in chain:
        if isinstance(e, (u3.NewConnectionError, ConnectionError, OSError)):
            return "could not connect"
    text = (str(exc).strip().splitlines() or [""])[0][:160]  # not a connection failure: its own first words
    return f"failed ({type(exc).__name__}: {text})" if text else f"failed ({type(exc).__name__})"
