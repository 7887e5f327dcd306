"""Member clusters for the console (docs/multicluster.md): each member Region's nodes and pods, read from
the member itself, and whether it answers.

The console finds a member's kubeconfig the way the operator does: the Secret the Region's
`spec.cluster.secretRef` names (namespace heterojob-members), read with the console's own credentials
(manifests/multicluster/manager.yaml lets its ServiceAccount `get` Secrets there and nowhere else). The
kubeconfig is parsed in memory and never shown, logged or kept in a page's data: a problem is told by
naming the Secret and the key. Jobs, quotas and Regions stay the manager's; only nodes and pods (what the
Overview, Devices and Jobs pages count) come from the members. Every member is read at once, each call
with a short timeout, so one member that does not answer costs the page at most that timeout and shows
as unreachable while the others render.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kubernetes
import pandas as pd
from kubernetes.client import ApiException

from heterojob.kube.members import KubeconfigInvalid, MemberRef, decode_secret_value, member_configuration, member_ref
from heterojob.failures import describe

log = logging.getLogger("heterojob.console")

LOCAL = "manager"  # the member column's value for the manager's own cluster
TIMEOUT_S = 3.0  # one call to a member; no answer by then: unreachable for this read
COLUMNS = ["member", "region", "reachable", "nodes", "pods", "seen", "message"]


@dataclass
class MemberRead:
    """One member as the console last read it: its nodes and pods (raw objects) or why it could not."""

    region: str
    reachable: bool
    message: str  # "<n> nodes, <m> pods", or what is wrong (never the kubeconfig's content)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    seen: datetime | None = None  # when `nodes` and `pods` were read (unreachable: the last read that worked)


_last: dict[str, MemberRead] = {}  # region -> its last read that worked, shown (as not ready) while it is away


def _away(region: str, message: str) -> MemberRead:
    """An unreachable member: its nodes and pods as last read by this console (its nodes then count as not
    ready, not as gone: the fleet did not shrink), or none when it never answered since the console started."""
    last = _last.get(region)
    if last is None:
        return MemberRead(region, False, message)
    return MemberRead(region, False, message, last.nodes, last.pods, last.seen)


class Unusable(Exception):
    """The member cannot be read now; the message is for people and names no credential."""


_clients: dict[str, tuple[str, kubernetes.client.ApiClient]] = {}  # region -> (kubeconfig digest, client)
_lock = threading.Lock()


def _client(core: kubernetes.client.CoreV1Api, ref: MemberRef) -> kubernetes.client.ApiClient:
    """The member's client, built from its Secret (rebuilt only when the kubeconfig changes)."""
    try:
        secret = core.read_namespaced_secret(ref.name, ref.namespace, _request_timeout=TIMEOUT_S)
    except ApiException as exc:
        if exc.status == 404:
            raise Unusable(f"{ref.secret} not found") from None
        if exc.status == 403:
            raise Unusable(f"the console may not read {ref.secret}: apply manifests/multicluster/manager.yaml "
                           "(it lets the console get Secrets in heterojob-members)") from None
        raise Unusable(f"{ref.secret} could not be read: HTTP {exc.status}") from None
    except Exception as exc:  # noqa: BLE001 - the manager's own API server did not answer
        raise Unusable(_log(ref.region, f"{ref.secret} could not be read: the manager's API server "
                                        f"{describe(exc, TIMEOUT_S)}", exc)) from None
    data = (secret.data or {}).get(ref.key)
    if data is None:
        raise Unusable(f"{ref.secret} has no key {ref.key!r}")
    raw, digest = decode_secret_value(data)
    with _lock:
        cached = _clients.get(ref.region)
        if cached is not None and cached[0] == digest:
            return cached[1]
    try:
        config = member_configuration(raw, ref.secret)
    except KubeconfigInvalid as exc:
        raise Unusable(str(exc)) from None
    api = kubernetes.client.ApiClient(config)
    with _lock:
        old = _clients.get(ref.region)
        _clients[ref.region] = (digest, api)
    if old is not None:
        old[1].close()
    return api


_said: dict[str, str] = {}  # region -> the problem last logged (logged once, not at every read)


def _log(region: str, said: str, detail: object) -> str:
    """`said` (what people see), with the exception's full text in the log once per change."""
    if _said.get(region) != said:
        _said[region] = said
        log.warning("member cluster %s: %s (%s)", region, said, detail)
    return said


def _items(call: Any) -> list[dict[str, Any]]:
    return list(json.loads(call(_preload_content=False, _request_timeout=TIMEOUT_S).data).get("items") or [])


def read_one(core: kubernetes.client.CoreV1Api, ref: MemberRef) -> MemberRead:
    """The member's nodes and pods (every pod: what any pod holds counts as allocated, as in the manager)."""
    try:
        api = _client(core, ref)
        member = kubernetes.client.CoreV1Api(api)
        nodes = _items(member.list_node)
        pods = _items(member.list_pod_for_all_namespaces)
    except Unusable as exc:
        return _away(ref.region, _log(ref.region, str(exc), "its Secret or kubeconfig"))
    except ApiException as exc:
        why = {401: f"refused the credentials in {ref.secret}",
               403: "refuses to list nodes or pods: apply manifests/multicluster/member.yaml there"
               }.get(exc.status, "answered")
        return _away(ref.region, _log(ref.region, f"the member's API server {why} (HTTP {exc.status})",
                                      f"HTTP {exc.status} {exc.reason}"))
    except Exception as exc:  # noqa: BLE001 - connection refused, timeout, TLS: in words; the detail is logged
        return _away(ref.region, _log(ref.region, "the member's API server did not answer: "
                                      f"{describe(exc, TIMEOUT_S)}", exc))
    if _said.pop(ref.region, None) is not None:
        log.info("member cluster %s answers again", ref.region)
    read = _last[ref.region] = MemberRead(ref.region, True, f"{len(nodes)} nodes, {len(pods)} pods", nodes, pods,
                                          datetime.now(UTC))
    return read


def forget() -> None:
    """Drop every member client and last read (tests; a process that starts over)."""
    with _lock:
        for _, api in _clients.values():
            api.close()
        _clients.clear()
    _last.clear()
    _said.clear()


def read(core: kubernetes.client.CoreV1Api, region_objs: Iterable[Mapping[str, Any]]) -> list[MemberRead]:
    """Every member Region's cluster, read concurrently; [] when no Region names one (one cluster)."""
    refs = [ref for o in region_objs if (ref := member_ref(o)) is not None]
    if not refs:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(refs)), thread_name_prefix="console-member") as pool:
        return list(pool.map(lambda ref: read_one(core, ref), refs))


def frame(reads: Iterable[MemberRead]) -> pd.DataFrame:
    """One row per member: member (its Region's name), reachable, node and pod counts, message."""
    rows = [{"member": r.region, "region": r.region, "reachable": r.reachable,
             "nodes": len(r.nodes) if r.seen else None, "pods": len(r.pods) if r.seen else None,
             "seen": r.seen, "message": r.message} for r in reads]
    return pd.DataFrame(rows, columns=COLUMNS)


def show(members: pd.DataFrame) -> None:
    """The Overview's member line: reachability of every member (nothing in a one-cluster install)."""
    import streamlit as st

    if members.empty:
        return
    up = int(members["reachable"].sum())
    st.caption(f"Member clusters: {up} of {len(members)} reachable (nodes and pods read from each member; jobs "
               "and quotas from the manager)")
    for row in members[~members["reachable"]].itertuples():
        st.warning(f"Member cluster {row.member} is unreachable: {row.message}. " + (
            f"Its {int(row.nodes)} nodes count as not ready (as last read at {row.seen:%H:%M:%S} UTC); the rest of the "
            "fleet is current." if row.seen is not None and not pd.isna(row.seen) else
            "Its nodes are unknown (it has not answered since the console started); the rest of the fleet shows."))
    st.dataframe(members[["member", "reachable", "nodes", "pods", "seen", "message"]], hide_index=True,
                 width="stretch", key="members", column_config={  # widths: every column shows at 1280 px
                     "member": st.column_config.TextColumn("member", width=130),
                     "reachable": st.column_config.CheckboxColumn("reachable", width=85),
                     "nodes": st.column_config.NumberColumn("nodes", width=65),
                     "pods": st.column_config.NumberColumn("pods", width=65),
                     "seen": st.column_config.DatetimeColumn("nodes read at", format="HH:mm:ss", width=110,
                                                             help="when its nodes and pods were last read"),
                     "message": st.column_config.TextColumn("message", width=520)})
