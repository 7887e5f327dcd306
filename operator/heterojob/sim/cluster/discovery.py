"""`/api/v1` and `/apis/{group}/{version}` resource lists shaped like kube-apiserver's (v1.32).

kmock lists a subresource like its parent (same short names, singular name and verbs), so kubectl warns that
`hj` could also match `heterojobs/status`. A real server lists `heterojobs/status` with no short names,
no categories, an empty singular name and only the verbs the subresource has.
"""

from __future__ import annotations

from typing import Any

SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "binding": ["create"], "log": ["get"],
                     "eviction": ["create"], "scale": ["get", "patch", "update"]}
SERVED_SUBRESOURCES = {"status", "binding", "log"}  # what the emulator answers (apiserver._serve)


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
            sub_kind = {"binding": "Binding", "log": "Pod"}.get(sub, kind)
            entries.append({"name": f"{res.plural}/{sub}", "singularName": "", "namespaced": bool(info.namespaced),
                            "kind": sub_kind, "verbs": SUBRESOURCE_VERBS.get(sub, ["get"])})
    if not entries and group:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries}
