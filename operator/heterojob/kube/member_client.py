"""How the manager reaches a member cluster: its settings, the Secret a Region names, the client its kubeconfig
builds (`MemberKube`: every call bounded, failing at once while the member does not answer), and `UnusableMember`, why a
member cannot be used (docs/multicluster.md). The kubeconfig is never logged: messages name the Secret and the key.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import kubernetes
import yaml

from heterojob.api.common import SpecError, parse_spec
from heterojob.api.region import RegionSpec
from heterojob.kube.api import Kube, Unanswered

T = TypeVar("T")


@dataclass(frozen=True)
class MembersConfig:
    poll_seconds: float = 2.0  # how often each member is probed (reachability, leftovers); its changes come by watch
    loss_timeout_s: float = 900.0  # unreachable this long: lost, its jobs re-placed (MultiKueue's 15 min)
    request_timeout_s: float = 10.0  # one call to a member; longer counts as not answering
    secret_refresh_s: float = 30.0  # a rotated kubeconfig is picked up this fast
    contact_write_s: float = 30.0  # Region status.lastContact is written at most this often


@dataclass(frozen=True)
class MemberRef:
    """Where a member region's kubeconfig is: a key of a Secret in the manager cluster."""

    region: str
    namespace: str
    name: str
    key: str
    loss_timeout_s: float | None = None

    @property
    def secret(self) -> str:
        return f"Secret {self.namespace}/{self.name} (key {self.key!r})"


def member_ref(obj: Mapping[str, Any]) -> MemberRef | None:
    """The member cluster a Region object names, or None (a local region, or an invalid spec)."""
    name = (obj.get("metadata") or {}).get("name", "")
    try:
        spec = parse_spec(RegionSpec, obj.get("spec"))
    except SpecError:
        return None  # convert.region_info logs it
    if spec.cluster is None:
        return None
    ref = spec.cluster.secret_ref
    timeout = spec.cluster.loss_timeout_seconds
    return MemberRef(name, ref.namespace, ref.name, ref.key, float(timeout) if timeout else None)


class KubeconfigInvalid(ValueError):
    """A member kubeconfig that does not load; the message names the Secret, never the content."""


def decode_secret_value(data: str) -> tuple[bytes, str]:
    """A Secret's base64 value and its sha256 digest (to rebuild a client only when the kubeconfig changes)."""
    raw = base64.b64decode(data)
    return raw, hashlib.sha256(raw).hexdigest()


def member_configuration(raw: bytes, secret: str) -> kubernetes.client.Configuration:
    """A client configuration from a member's kubeconfig (the operator's and the console's one reading of it).

    Retries are off: the next probe (or the informer's backoff) is the retry, and a timeout means the member did not answer. Raises
    `KubeconfigInvalid` naming `secret` and the loader's first words, never the content (it holds credentials).
    """
    try:
        config_dict = yaml.safe_load(raw)
        if not isinstance(config_dict, dict):
            raise kubernetes.config.ConfigException("not a kubeconfig document")
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config_from_dict(config_dict, client_configuration=config)
    except Exception as exc:  # noqa: BLE001 - never echo the content: the type and the loader's words
        why = str(exc).splitlines()[0][:200] if isinstance(exc, kubernetes.config.ConfigException) else \
            type(exc).__name__
        raise KubeconfigInvalid(f"the kubeconfig in {secret} does not load: {why}") from None
    config.retries = 0
    return config


class MemberUnavailable(Unanswered):
    """A member region's cluster has no working client now (credentials, or not answering)."""


class MemberKube(Kube):
    """A `Kube` whose every call to the member carries a timeout, and fails at once while the member is
    known not to answer (calls queued behind a partition would otherwise wait their turn to time out)."""

    def __init__(self, client: kubernetes.client.ApiClient, timeout: float, workers: int = 8) -> None:
        super().__init__(client, workers=workers)
        self.timeout = timeout  # `Kube.request`'s bound too
        self.answering = True  # set by `Members` after each poll; its own probes go through regardless

    def guard(self) -> None:
        if not self.answering:
            raise MemberUnavailable("the member cluster does not answer")

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        kwargs.setdefault("_request_timeout", self.timeout)
        probe = kwargs.pop("_probe", False)

        def guarded(*a: Any, **kw: Any) -> T:
            if not (probe or self.answering):
                raise MemberUnavailable("the member cluster does not answer")
            return fn(*a, **kw)

        return await super().call(guarded, *args, **kwargs)


class UnusableMember(Exception):
    """Why a member cannot be used: a condition reason and a message for people (never the kubeconfig)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
