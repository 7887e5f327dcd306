"""Read and patch one pod through the Kubernetes API with the standard library only (urllib, ssl, json).

In a pod, `PodClient.in_cluster()` uses what the kubelet mounts and sets, as client-go's rest.InClusterConfig
does: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, the service account token (read again for
every request: the kubelet rotates it) and the cluster CA under /var/run/secrets/kubernetes.io/serviceaccount.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Protocol

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
USER_AGENT = "heterojob-sdk/0.1.0"


class ApiError(Exception):
    """A request that did not succeed: `status` is the HTTP status, 0 when no answer came (no API server,
    refused connection, timeout, TLS failure)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message


class PodAPI(Protocol):
    """What the Checkpointer needs of the API: its own pod, read and merge-patched."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> Any: ...


class PodClient:
    def __init__(self, server: str, *, token: str | None = None, token_file: str | Path | None = None,
                 ca_file: str | Path | None = None, timeout_s: float = 5.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.token_file = Path(token_file) if token_file else None
        self.timeout_s = timeout_s
        handlers: list[urllib.request.BaseHandler] = []
        if self.server.startswith("https://"):
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(
                cafile=str(ca_file) if ca_file else None)))
        self._opener = urllib.request.build_opener(*handlers)

    @classmethod
    def in_cluster(cls, timeout_s: float = 5.0, directory: Path = SERVICE_ACCOUNT_DIR) -> PodClient:
        """The API server as seen from a pod; ApiError(0, why) when this process is not in one."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise ApiError(0, "no API server: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set "
                              "(not running in a pod)")
        if not (directory / "token").exists():
            raise ApiError(0, f"no service account token at {directory / 'token'} (the pod sets "
                              "automountServiceAccountToken: false?)")
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token_file=directory / "token", ca_file=directory / "ca.crt",
                   timeout_s=timeout_s)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._request("GET", self._pod_path(namespace, name))

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of the pod, e.g. {"metadata": {"annotations": {...}}}."""
        return self._request("PATCH", self._pod_path(namespace, name), patch, "application/merge-patch+json")

    @staticmethod
    def _pod_path(namespace: str, name: str) -> str:
        quote = urllib.parse.quote
        return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"

    def _bearer(self) -> str | None:
        if self.token_file is not None:
            try:
                return self.token_file.read_text().strip()
            except OSError as exc:
                raise ApiError(0, f"cannot read the service account token {self.token_file}: {exc}") from None
        return self.token

    def _request(self, method: str, path: str, body: Any = None, content_type: str | None = None
                 ) -> dict[str, Any]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type or "application/json"
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, _status_message(exc)) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:  # refused, DNS, TLS, timeout, bad URL
            reason = getattr(exc, "reason", exc)
            raise ApiError(0, f"{method} {self.server}{path}: {type(reason).__name__}: {reason}") from None
        try:
            out = json.loads(raw or b"{}")
        except ValueError:
            raise ApiError(0, f"{method} {path}: the answer is not JSON") from None
        return out if isinstance(out, dict) else {}


def _status_message(exc: urllib.error.HTTPError) -> str:
    """The `message` of the API server's Status body, else the HTTP reason."""
    try:
        body = exc.read(65536)
        message = json.loads(body).get("message")
    except Exception:  # noqa: BLE001 - any body that is not a Status: the reason phrase
        message = None
    return str(message or exc.reason or "")
