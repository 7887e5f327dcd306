"""The pods this operator created, annotated or deleted whose watch event has not come yet (client-go's controller
"expectations"), so a pass can read a job's pods from the watch (a Kopf index) rather than list them.

- `seen` is told every watch event of a job's pod: it drops what the event makes known and says whether the event
  is the pod just as the operator wrote it (its echo: nothing happened to it that its writer does not know).
- `merged` is what a pass reads: the watched pods, with a pod created or annotated since as the write answered,
  and a pod deleted since as the delete left it: being deleted (its grace period, as the delete's answer says),
  or gone (deleted at once, or gone already) until its DELETED event comes.

Versions are compared as integers (a resource's resourceVersions are comparable, KEP-5504).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from heterojob.constants import LABEL_JOB

REMEMBERED = 4096  # pods created or deleted whose watch event has not come (the oldest are forgotten first)


def _version(pod: Mapping[str, Any] | None) -> int:
    rv = ((pod or {}).get("metadata") or {}).get("resourceVersion")
    return int(rv) if isinstance(rv, str) and rv.isdigit() else 0


def answer_body(answer: Any) -> dict[str, Any] | None:
    """The pod in an API answer (parsed, or asked for unparsed: `_preload_content=False`), or None (a Status)."""
    try:
        body = answer if isinstance(answer, dict) else json.loads(answer.data)
    except (AttributeError, TypeError, ValueError):
        return None
    return body if isinstance(body, dict) and body.get("kind") == "Pod" else None


def kept(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What a pass reads of a watched pod (`kube.convert.pod_view`), kept in the index instead of the whole pod."""
    meta = pod.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations", "deletionTimestamp",
                                               "resourceVersion") if k in meta},
            "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")}, "status": pod.get("status") or {}}


class OwnPods:
    """Per (namespace, pod name): a create on its way, a create's answer, a delete's answer."""

    def __init__(self) -> None:
        self.making: set[tuple[str, str]] = set()  # creates on their way
        self._made: dict[tuple[str, str], dict[str, Any]] = {}  # created or annotated: the pod as the write answered
        self._gone: dict[tuple[str, str], dict[str, Any] | None] = {}  # deleted: the pod being deleted; None: gone

    def jobs(self) -> set[str]:
        """The jobs (namespace/name) of the pods created whose watch event or listing has not come yet."""
        return {f"{ns}/{((pod.get('metadata') or {}).get('labels') or {}).get(LABEL_JOB)}"
                for (ns, _), pod in self._made.items() if ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB)}

    def written(self, namespace: str, name: str, pod: dict[str, Any] | None) -> None:
        """A create's or a patch's answer: the pod as this operator wrote it."""
        if pod is not None:
            self._remember(self._made, (namespace, name), pod)

    def deleted(self, namespace: str, name: str, pod: dict[str, Any] | None) -> None:
        """A delete's answer: the pod being deleted (its grace period); without a deletionTimestamp (deleted at
        once), None (a Status, or not found): gone."""
        self._gone.pop((namespace, name), None)
        deleting = pod if pod is not None and (pod.get("metadata") or {}).get("deletionTimestamp") else None
        self._remember(self._gone, (namespace, name), deleting)

    @staticmethod
    def _remember(store: dict[tuple[str, str], Any], key: tuple[str, str], value: Any) -> None:
        store[key] = value
        while len(store) > REMEMBERED:
            store.pop(next(iter(store)))

    def seen(self, namespace: str, name: str, pod: Mapping[str, Any], event: str | None) -> bool:
        """A watch event (`event`: its type; None for a listing's) of the pod. True when it is the pod just as this
        operator wrote it: its write's answer, or a first event while its create is on its way (the pod it
        made, or one of the name that the create finds in its way)."""
        key = (namespace, name)
        first = event in (None, "ADDED")
        if first and key in self.making:
            return True
        v = _version(pod)
        made = self._made.pop(key, None)
        if key in self._gone:
            gone = self._gone[key]
            if event == "DELETED" or first or (gone is not None and v >= _version(gone)):
                del self._gone[key]  # the watch says as much from here on
        return made is not None and v != 0 and v == _version(made)

    def merged(self, namespace: str, job: str, watched: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The job's pods: `watched` (the watch's), each replaced by what this operator's own write (a create, an
        annotation, a delete) answered when that is newer, with the pods it created that the watch has not brought
        yet."""
        pods: dict[str, Mapping[str, Any]] = {}
        for pod in watched:
            pods[(pod.get("metadata") or {}).get("name", "")] = pod
        for (ns, name), made in self._made.items():
            if ns == namespace and ((made.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB) == job \
                    and _version(made) > _version(pods.get(name)):
                pods[name] = made
        for (ns, name), gone in self._gone.items():
            if ns != namespace or name not in pods:
                continue
            if gone is None:
                del pods[name]
            elif _version(gone) > _version(pods[name]):
                pods[name] = gone
        return list(pods.values())
