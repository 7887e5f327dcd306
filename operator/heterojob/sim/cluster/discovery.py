"""`/api/v1` and `/apis/{group}/{version}` resource lists shaped like kube-apiserver's (v1.32).

kmock lists a subresource like its parent (same short names, singular name and verbs), so kubectl warns that
`hj` could also match `heterojobs/status`. A real server lists `heterojobs/status` with no short names,
no categories, an empty singular name and only the verbs the subresource has.
"""

from __future__ import annotations

from typing import Any

SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "binding": ["create"], "log": ["get"],
                     "eviction": ["create"], "scale": ["get", "patch", "update"], "exec": ["create", "get"],
                     "attach": ["create", "get"], "portforward": ["create", "get"],
                     "proxy": ["create", "delete", "get", "patch", "update"]}
# what the emulator answers (serving.py `_serve`; exec, attach, portforward and proxy with the error of a node whose
# kubelet cannot be reached)
SERVED_SUBRESOURCES = {"status", "binding", "log", "eviction", "scale", "exec", "attach", "portforward", "proxy"}
# subresources whose kind is not the parent's: (kind, group, version) as kube-apiserver v1.32 lists them
_SUB_KINDS = {"binding": ("Binding", None, None), "log": ("Pod", None, None), "eviction": ("Eviction", "policy", "v1"),
              "scale": ("Scale", "autoscaling", "v1"), "exec": ("PodExecOptions", None, None),
              "attach": ("PodAttachOptions", None, None), "portforward": ("PodPortForwardOptions", None, None)}


def resource_list(resources: Any, group: str, version: str) -> dict[str, Any] | None:
    entries: list[dict[str, Any]] = []
    for res in resources:
        if res.group != group or res.version != version or not res.plural:
            continue
        info = resources[res]
        kind = info.kind or res.plural.capitalize()
        entry: dict[str, Any] = {"name": res.plural, "singularName": info.singular or "", "namespaced":
                                 bool(info.namespaced), "kind": kind, "verbs": sorted(info.verbs or ())}
        if info.shortnames:
            entry["shortNames"] = sorted(info.shortnames)
        if info.categories:
            entry["categories"] = sorted(info.categories)
        entries.append(entry)
        for sub in sorted(set(info.subresources or ()) & SERVED_SUBRESOURCES):
            sub_kind, sub_group, sub_version = _SUB_KINDS.get(sub, (kind, None, None))
            if sub == "proxy":
                sub_kind = f"{kind}ProxyOptions"
            entry = {"name": f"{res.plural}/{sub}", "singularName": "", "namespaced": bool(info.namespaced),
                     "kind": sub_kind, "verbs": SUBRESOURCE_VERBS.get(sub, ["get"])}
            if sub_group is not None:
                entry.update(group=sub_group, version=sub_version)
            entries.append(entry)
    if not entries and group:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries}
