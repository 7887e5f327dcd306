"""The API calls `kube.api.Kube.send` makes on the event loop (aiohttp), each named as the kubernetes client names it
(so the RBAC tests derive the operator's grants from the names the code uses), and where the API server is.

A patch of a built-in kind is a strategic merge patch, as the kubernetes client sends a dict; of a custom resource
a JSON merge patch (the API server has no strategic merge for them)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import kubernetes

JSON = "application/json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

_CORE = "/api/v1/namespaces/{namespace}"
_RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
_CUSTOM = "/apis/{group}/{version}"

# the kubernetes client's name of the call -> (HTTP method, path, content type of the body)
ROUTES: dict[str, tuple[str, str, str]] = {
    "list_namespaced_pod": ("GET", _CORE + "/pods", JSON),
    "read_namespaced_pod": ("GET", _CORE + "/pods/{name}", JSON),
    "create_namespaced_pod": ("POST", _CORE + "/pods", JSON),
    "patch_namespaced_pod": ("PATCH", _CORE + "/pods/{name}", STRATEGIC),
    "delete_namespaced_pod": ("DELETE", _CORE + "/pods/{name}", JSON),
    "read_namespaced_service": ("GET", _CORE + "/services/{name}", JSON),
    "create_namespaced_service": ("POST", _CORE + "/services", JSON),
    "delete_namespaced_service": ("DELETE", _CORE + "/services/{name}", JSON),
    "create_namespaced_event": ("POST", _CORE + "/events", JSON),
    "patch_namespaced_event": ("PATCH", _CORE + "/events/{name}", STRATEGIC),
    "create_namespaced_config_map": ("POST", _CORE + "/configmaps", JSON),
    "patch_namespaced_config_map": ("PATCH", _CORE + "/configmaps/{name}", STRATEGIC),
    "create_namespaced_service_account": ("POST", _CORE + "/serviceaccounts", JSON),
    "patch_namespaced_service_account": ("PATCH", _CORE + "/serviceaccounts/{name}", STRATEGIC),
    "create_namespaced_role": ("POST", _RBAC + "/roles", JSON),
    "patch_namespaced_role": ("PATCH", _RBAC + "/roles/{name}", STRATEGIC),
    "create_namespaced_role_binding": ("POST", _RBAC + "/rolebindings", JSON),
    "patch_namespaced_role_binding": ("PATCH", _RBAC + "/rolebindings/{name}", STRATEGIC),
    "get_namespaced_custom_object": ("GET", _CUSTOM + "/namespaces/{namespace}/{plural}/{name}", JSON),
    "list_cluster_custom_object": ("GET", _CUSTOM + "/{plural}", JSON),
    "patch_namespaced_custom_object": ("PATCH", _CUSTOM + "/namespaces/{namespace}/{plural}/{name}", MERGE),
    "patch_namespaced_custom_object_status": ("PATCH", _CUSTOM + "/namespaces/{namespace}/{plural}/{name}/status",
                                              MERGE),
    "create_cluster_custom_object": ("POST", _CUSTOM + "/{plural}", JSON),
    "patch_cluster_custom_object_status": ("PATCH", _CUSTOM + "/{plural}/{name}/status", MERGE),
}


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach the API server, from the kubernetes client's configuration (kubeconfig or
    in-cluster): its address, TLS (CA, client certificate, server name, verification) and proxy. Credentials are
    asked of the configuration per call (`headers`), so a rotated token (in-cluster, exec plugins) is used."""

    base: str
    ssl: ssl.SSLContext | bool
    server_hostname: str | None
    proxy: str | None

    @staticmethod
    def of(config: kubernetes.client.Configuration) -> Endpoint:
        base = str(config.host).rstrip("/")
        context: ssl.SSLContext | bool = False
        if base.startswith("https:"):
            context = ssl.create_default_context(cafile=config.ssl_ca_cert or None)
            if config.cert_file:
                context.load_cert_chain(config.cert_file, config.key_file or None)
            if not config.verify_ssl:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif config.assert_hostname is False:
                context.check_hostname = False
        return Endpoint(base, context, getattr(config, "tls_server_name", None) or None, config.proxy or None)


def headers(config: kubernetes.client.Configuration) -> dict[str, str]:
    """The credentials the configuration holds now (a bearer token, refreshed by its hook; or basic auth)."""
    settings: dict[str, Any] = dict(config.auth_settings())
    out = {str(s["key"]): str(s["value"]) for s in settings.values() if s.get("in") == "header" and s.get("value")}
    if config.username and "authorization" not in {k.lower() for k in out}:
        out["Authorization"] = str(config.get_basic_auth_token())
    return out
