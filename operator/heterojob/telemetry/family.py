"""What every exporter family's adapter shares: its roles, its fleet-wide queries and the parse of their answers.

An adapter asks a fixed set of fleet-wide queries whatever the number of jobs or devices (docs/telemetry.md,
"How heterojob reads the exporters"):
- the identity query: every label that places a device (node, pod, model), with its windowed utilization;
- one per other windowed role (min/max_over_time, so one noisy scrape does not trigger anything);
- one per figure Prometheus computes (the framebuffer's total: used + free + reserved);
- one for the remaining roles together (`{__name__=~"A|B"}`, split again by metric name), instant where the
  exporter lets Prometheus mark vanished series stale, `last_over_time` over the window where it stamps its
  own timestamps (npu-exporter: no staleness markers, an instant query would see a gone chip for 5 minutes);
- `seen`, asked only in a second round and only for the scrape targets of devices the identity answer
  holds twice: the newest sample time per device and pod, to tell the current pod from the one that held
  the device earlier in the window (two series, one per pod, are not a data problem: the newest wins).
Results are Prometheus instant vectors: `[{"metric": {labels}, "value": [ts, "str"]}, ...]`. The families are in
`telemetry/adapters.py`; AMD, Cambricon and Hygon plug in as further `Adapter` subclasses (metric names in
docs/telemetry.md, section 3).
"""

from __future__ import annotations

import re
from math import isfinite
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from heterojob.telemetry.labels import (
    HOST_LABELS, INSTANCE_LABELS, POD_LABELS, RELABELLED_NODE_LABELS, Context, first_label, node_of_series, workload_of,
)
from heterojob.telemetry.model import DeviceSample, HealthPolicy, number

Vector = Sequence[Mapping[str, Any]]
Where = tuple[str | None, str | None]  # (region, device class) of a node


@dataclass
class ParseReport:
    """What was wrong with the data, for the TelemetryDegraded condition (never an action)."""

    missing_labels: int = 0
    duplicates: int = 0
    bad_values: int = 0
    unresolved_nodes: int = 0  # a host label that names no Node and no relabelled node label
    uncollected: int = 0  # the exporter's own "not collected" values (-1, 4294967295): missing, not wrong
    pod_changes: int = 0  # devices whose pod changed within the window (the newest pod kept)
    shared: int = 0  # devices serving several pods at once (GPU sharing, Ascend 310P vNPUs): no one pod's
    notes: list[str] = field(default_factory=list)

    @property
    def degraded(self) -> bool:
        return bool(self.missing_labels or self.duplicates or self.bad_values or self.unresolved_nodes)


INSTANT = "instant"  # the query name under which an adapter's grouped roles come back together
SEEN = "seen"  # newest sample time per device and pod
FALLBACK = "fallback"  # the identity from `fallback_identity`, asked only for devices the identity answer lacks
ROLE_LABEL = "heterojob_metric"  # names the metric in a grouped query whose function dropped __name__


@dataclass(frozen=True)
class Role:
    metric: str
    fn: str = ""  # "" for the grouped query; else a function over the window, e.g. "avg_over_time"
    param: str = ""  # a leading argument of `fn`, e.g. "0.5" for quantile_over_time; without `fn`, the PromQL
    # of a figure Prometheus computes per device (`metric` then only names it)
    scale: float = 1.0  # DCGM_FI_PROF_* are ratios: x100 to a percent
    selector: str = ""  # a label matcher the fleet-wide query keeps (never one naming a job or device)
    over: str = ""  # in a windowed grouped query, this role's function instead of the adapter's `grouped_fn`
    legacy: str = ""  # the same figure under an older exporter's name (read with `or`: the current name wins)
    # how a device's series of this role combine ("" the first; "max": the largest, e.g. a health held for the
    # window, split in two series by a pod change: 0 only when both said so)
    merge: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.metric, self.legacy) if self.legacy else (self.metric,)

    def expr(self, selector: str, window_s: int) -> str:
        sel = selector or self.selector
        if not self.fn:
            return f"{self.metric}{sel}"
        args = f"{self.param}, " if self.param else ""
        out = " or ".join(f"{self.fn}({args}{m}{sel}[{window_s}s])" for m in self.names)
        if self.scale != 1:
            return f"{self.scale:g} * ({out})" if self.legacy else f"{self.scale:g} * {out}"
        return out


class Adapter:
    family: ClassVar[str]
    # role -> Role; the identity role may have alternatives (the first metric a device has wins)
    roles: ClassVar[dict[str, Role]]
    identity: ClassVar[str] = "util"
    identity_alternatives: ClassVar[tuple[Role, ...]] = ()
    key_labels: ClassVar[tuple[str, ...]]  # enough to name the device
    identity_labels: ClassVar[tuple[str, ...]]  # what `sample` reads: the rest is dropped by Prometheus
    group_labels: ClassVar[tuple[str, ...]] = ()  # extra labels the grouped query keeps (e.g. `xid`)
    grouped_fn: ClassVar[str] = ""  # "" instant; "last_over_time" for exporters that stamp timestamps
    # roles whose queries keep the identity labels too, so a device without an identity series is still placed
    # (node, pod, model) from them, the first that reports it: a GPU without DCGM_FI_DEV_GPU_UTIL by its
    # temperature, a GPU that fell off the bus (nothing but its XID left) or a broken NPU chip (nothing but its
    # health) by its fault series. The first also selects the devices `fallback_query` asks for.
    labelled_roles: ClassVar[tuple[str, ...]] = ()
    # the identity metric of devices without the usual one, asked in a second round only for those devices
    fallback_identity: ClassVar[Role | None] = None
    fallback_keys: ClassVar[tuple[str, ...]] = ()  # the labels that select a device in the fallback query

    metrics: ClassVar[dict[str, tuple[str, str]]]  # role -> (metric, function): what is read, for listings

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.metrics = {role: (r.metric, r.fn) for role, r in cls.roles.items()}

    def queries(self, window_s: int) -> dict[str, str]:
        """Query name -> PromQL: identity, one per other windowed role and the grouped roles (`seen` is asked
        apart, by `seen_query`, only when needed)."""
        out = {}
        keys = ", ".join(self.key_labels)
        ident = ", ".join(self.identity_labels)
        for role, r in self.roles.items():
            if not r.fn:
                continue
            if role == self.identity:
                out[role] = " or ".join(f"max by ({ident}) ({alt.expr('', window_s)})"
                                        for alt in (r, *self.identity_alternatives))
            elif role in self.labelled_roles:
                out[role] = f"max by ({ident}) ({r.expr('', window_s)})"
            else:
                out[role] = f"max by ({keys}) ({r.expr('', window_s)})"
        # a figure Prometheus computes is a query of its own: evaluated beside the grouped one, not after it
        # (joined with `or`, the two made the cycle's slowest query)
        out.update({role: r.param for role, r in self.roles.items() if not r.fn and r.param})
        parts = []
        for labelled in (False, True):  # fault series keep the identity labels: they may be all a device has
            grouped = [r for role, r in self.roles.items()
                       if not r.fn and not r.param and (role in self.labelled_roles) == labelled]
            if not grouped:
                continue
            by = ", ".join(dict.fromkeys((*(self.identity_labels if labelled else self.key_labels),
                                          *self.group_labels)))
            if not self.grouped_fn:
                parts.append(f'max by (__name__, {by}) ({{__name__=~"{"|".join(m for r in grouped for m in r.names)}"}})')
            else:  # functions drop __name__: each metric is marked with a label of its own instead
                parts += [f'label_replace(max by ({by}) ({r.over or self.grouped_fn}({r.metric}[{window_s}s])), '
                          f'"{ROLE_LABEL}", "{r.metric}", "", "")' for r in grouped]
        if parts:
            out[INSTANT] = " or ".join(parts)
        return out

    def seen_query(self, instances: Collection[str] = ()) -> str:
        """The newest sample time of each identity series (by device, scrape target and pod), of the scrape
        targets `instances` (all when empty)."""
        only = f'instance=~"{_alternatives(instances)}"' if instances else ""
        stand_ins = [(m, self.roles[role].selector) for role in self.labelled_roles for m in self.roles[role].names]
        seen = " or ".join(f"timestamp({m}{_matchers(sel, only)})" for m, sel in
                           ((r.metric, r.selector) for r in (self.roles[self.identity], *self.identity_alternatives)))
        if stand_ins:
            seen += " or " + " or ".join(f"timestamp({m}{_matchers(sel, only)})" for m, sel in stand_ins)
        by = dict.fromkeys((*self.key_labels, "instance", *POD_LABELS))
        return f"max by ({', '.join(by)}) ({seen})"

    def fallback_query(self, results: Mapping[str, Vector], window_s: int, most: int) -> str:
        """The fallback identity query for the devices the first of `labelled_roles` reports and the identity
        answer lacks (all devices when more than `most`), or "" when there are none."""
        r = self.fallback_identity
        if r is None or not self.labelled_roles:
            return ""
        have = {self.device_id(s_.get("metric") or {}) for s_ in results.get(self.identity) or ()}
        lacking: dict[str, set[str]] = {}
        for series in results.get(self.labelled_roles[0]) or ():
            labels = series.get("metric") or {}
            if self.device_id(labels) in have:
                continue
            key = next((k for k in self.fallback_keys if labels.get(k)), None)
            if key is not None:
                lacking.setdefault(key, set()).add(labels[key])
        if not lacking:
            return ""
        ident = ", ".join(self.identity_labels)
        if sum(map(len, lacking.values())) > most:
            return f"max by ({ident}) ({r.expr('', window_s)})"
        parts = []
        for key, values in sorted(lacking.items()):
            only = _matchers(r.selector, key + '=~"' + _alternatives(values) + '"')
            parts.append(f"max by ({ident}) ({r.expr(only, window_s)})")
        return " or ".join(parts)

    def doubled(self, results: Mapping[str, Vector], ctx: Context = Context()) -> set[str]:
        """Scrape targets (`instance`) of the devices the identity answer holds more than once (for a device
        without an identity series, the answer of the first of `labelled_roles` that reports it, which stands
        in for it). `results`: this family's answers by query name."""
        by_role = self.split(results)
        by_device: dict[str, list[Mapping[str, str]]] = {}
        for series in by_role.get(self.identity) or ():
            labels = series.get("metric") or {}
            if (device := self.device_id(labels, ctx)) is not None:
                by_device.setdefault(device, []).append(labels)
        for role in self.labelled_roles:
            stand_ins: dict[str, list[Mapping[str, str]]] = {}
            for series in by_role.get(role) or ():
                labels = series.get("metric") or {}
                if (device := self.device_id(labels, ctx)) is not None and device not in by_device:
                    stand_ins.setdefault(device, []).append(labels)
            by_device.update(stand_ins)
        return {labels.get("instance", "") for found in by_device.values() if len(found) > 1 for labels in found}

    def split(self, results: Mapping[str, Vector]) -> dict[str, Vector]:
        """Results by query name -> results by role (the grouped query is split by metric name)."""
        out: dict[str, list[Mapping[str, Any]]] = {role: list(v or ()) for role, v in results.items()
                                                   if role != INSTANT}
        # metric (or figure) name -> role
        role_of = {m: role for role, r in self.roles.items() if not r.fn for m in r.names}
        legacy = {r.legacy for r in self.roles.values() if r.legacy}
        older: list[tuple[str, Mapping[str, Any]]] = []
        for series in results.get(INSTANT) or ():
            labels = series.get("metric") or {}
            name = labels.get("__name__") or labels.get(ROLE_LABEL) or ""
            role = role_of.get(name)
            if role is not None and name in legacy:
                older.append((role, series))
            elif role is not None:
                out.setdefault(role, []).append(series)
        for role, series in older:  # after the current name's: a device reported under both reads the current one
            out.setdefault(role, []).append(series)
        return {role: series for role, series in out.items()}

    def device_id(self, labels: Mapping[str, str], ctx: Context = Context()) -> str | None:
        """The device a series is about, or None when its labels do not say."""
        raise NotImplementedError

    def clean(self, role: str, value: float | None, labels: Mapping[str, str]) -> tuple[float | None, bool]:
        """(value, uncollected): the exporter's "not collected" markers become None."""
        return value, False

    def sample(self, device_id: str, node: str, labels: Mapping[str, str], values: Mapping[str, Any],
               policy: HealthPolicy, where: Where = (None, None), ctx: Context = Context()) -> DeviceSample:
        """The canonical sample; `where` is (region, device class) joined from the Node."""
        raise NotImplementedError

    def parse(self, results: Mapping[str, Vector], policy: HealthPolicy, report: ParseReport | None = None,
              where: Callable[[str], Where] | None = None, ctx: Context = Context()) -> list[DeviceSample]:
        report = report if report is not None else ParseReport()
        results = self.split(results)
        seen = results.pop(SEEN, None) or ()
        fallback = results.pop(FALLBACK, None) or ()
        candidates: dict[str, list[Mapping[str, Any]]] = {}
        # labels-only identity, for devices without one: device -> labelled role -> its series
        stand_ins: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
        values: dict[str, dict[str, Any]] = {}
        some_labels: dict[str, Mapping[str, str]] = {}  # a series of each device, for its node when no identity
        unresolved: dict[str, str] = {}
        at: float | None = None  # every query of a cycle is evaluated at the same instant
        device_id, clean, identity = self.device_id, self.clean, self.identity
        labelled = self.labelled_roles
        # tallied here, added to `report` once (a cycle reads tens of thousands of series)
        missing = bad = uncollected_n = 0
        raw: Any
        value: float | None
        try:
            for role, vector in results.items():
                is_identity, is_count = role == identity, role == "xid_count"
                is_labelled = role in labelled
                most = self.roles[role].merge == "max" if role in self.roles else False
                for series in vector or ():
                    labels = series.get("metric") or {}
                    device = device_id(labels, ctx)
                    if device is None:
                        if (host := _unplaced(labels, ctx)) and first_label(labels, "UUID", "uuid", "id"):
                            unresolved.setdefault(host, role)
                        else:
                            missing += 1
                        continue
                    if is_identity:
                        if (listed := candidates.get(device)) is None:
                            candidates[device] = [series]
                        else:
                            listed.append(series)
                        continue
                    if is_labelled:
                        stand_ins.setdefault(device, {}).setdefault(role, []).append(series)
                    pair = series.get("value") or (None, None)
                    if at is None:
                        at = number(pair[0])
                    raw = pair[1]
                    try:  # `number`, inline
                        value = float(raw)
                        if not isfinite(value):
                            value = None
                    except (TypeError, ValueError):
                        value = None
                    if value is None and raw is not None:
                        bad += 1
                    value, uncollected = clean(role, value, labels)
                    uncollected_n += uncollected
                    mine = values.get(device)
                    if mine is None:
                        mine = values[device] = {}
                        some_labels[device] = labels
                    if is_count:
                        code = int(number(labels.get("xid")) or 0)
                        mine.setdefault("xid_counts", {})[code] = value
                    elif (held := mine.get(role)) is None:
                        mine[role] = value
                    elif most and value is not None:
                        mine[role] = max(held, value)
        finally:
            report.missing_labels += missing
            report.bad_values += bad
            report.uncollected += uncollected_n
        # a device without an identity series (dcgm-exporter 2.2.9-2.4.1's counters CSVs comment out
        # DCGM_FI_DEV_GPU_UTIL) takes its fallback identity (engine activity, with the dcp CSV); without one, it
        # is placed by the labels of its series of the first `labelled_roles` that has one (a broken device's
        # fault series may be all it has), its utilization unknown
        found: dict[str, list[Mapping[str, Any]]] = {}
        for series in fallback:
            device = device_id(series.get("metric") or {}, ctx)
            if device is not None and device not in candidates:
                found.setdefault(device, []).append(series)
        candidates.update(found)
        for device, by_role in stand_ins.items():
            if device not in candidates:
                series_list = next(by_role[r] for r in labelled if r in by_role)
                candidates[device] = [{"metric": s_.get("metric") or {}, "value": [(s_.get("value") or [None])[0],
                                                                                    None]} for s_ in series_list]
        newest = self._seen(seen, ctx) if any(len(c) > 1 for c in candidates.values()) else {}
        labels_of: dict[str, Mapping[str, str]] = {}
        several: set[str] = set()  # devices serving several pods at once
        for device, series_list in candidates.items():
            if len(series_list) == 1:
                chosen = series_list[0]
            else:
                chosen, shared_now = self._newest(device, series_list, newest, ctx, report)
                if shared_now:
                    several.add(device)
            labels = labels_of[device] = chosen.get("metric") or {}
            pair = chosen.get("value") or (None, None)
            if at is None:
                at = number(pair[0])
            value = number(pair[1])
            if value is None and pair[1] is not None:
                report.bad_values += 1
            value, uncollected = clean(identity, value, labels)
            report.uncollected += uncollected
            values.setdefault(device, {})[identity] = value
        out = []
        locate = where or (lambda _node: (None, None))
        for device in sorted(values):
            labels = labels_of.get(device) or some_labels.get(device) or {}
            node = node_of_series(labels, ctx) or node_of_series(some_labels.get(device, {}), ctx)
            if not node:
                if host := _unplaced(labels, ctx):
                    unresolved.setdefault(host, device)
                else:
                    report.missing_labels += 1  # no node label in any of its series: cannot place it
                continue
            mine = values[device]
            mine["at"] = at
            sample = self.sample(device, node, labels, mine, policy, locate(node), ctx)
            if device in several:
                sample = replace(sample, shared=True, namespace=None, pod=None)
            out.append(sample)
        if unresolved:
            report.unresolved_nodes += len(unresolved)
            hosts = ", ".join(sorted(unresolved)[:3])
            report.notes.append(f"host label(s) {hosts} name no Node: relabel __meta_kubernetes_pod_node_name "
                                f"to `node` (manifests/telemetry)")
        return out

    def _seen(self, seen: Vector, ctx: Context) -> dict[tuple[str, Any], float]:
        """(device, origin) -> its newest sample time, from the `seen` query."""
        newest: dict[tuple[str, Any], float] = {}
        for series in seen:
            labels = series.get("metric") or {}
            device = self.device_id(labels, ctx)
            ts = number((series.get("value") or [None, None])[1])
            if device is not None and ts is not None:
                key = (device, _origin(labels, ctx))
                newest[key] = max(ts, newest.get(key, ts))
        return newest

    @staticmethod
    def _newest(device: str, series_list: list[Mapping[str, Any]], newest: Mapping[tuple[str, Any], float],
                ctx: Context, report: ParseReport) -> tuple[Mapping[str, Any], bool]:
        """(one identity series per device, shared?): the one sampled most recently (its pod and exporter are
        the current ones); among equals, one naming a workload. Equally recent series naming different
        workloads are one device serving several pods at once (dcgm-exporter --kubernetes-virtual-gpus,
        since 4.1.1-4.0.3: a copy per pod sharing the GPU, with a `vgpu` label; npu-exporter on a 310P split
        into vNPUs: a copy per vNPU's pod): shared, the device-level series (no pod) when there is one.
        Equals that name the same workload, or none, are duplicates (two exporters for one device?)."""
        if len(series_list) == 1:
            return series_list[0], False

        def when(series: Mapping[str, Any]) -> float:
            return newest.get((device, _origin(series.get("metric") or {}, ctx)), float("-inf"))

        def rank(series: Mapping[str, Any]) -> tuple[float, bool]:
            return when(series), workload_of(series.get("metric") or {}, ctx.exporter_pods) != (None, None)

        ranked = sorted(series_list, key=rank, reverse=True)
        latest = [s_ for s_ in ranked if when(s_) == when(ranked[0])]
        current = {workload_of(s_.get("metric") or {}, ctx.exporter_pods) for s_ in latest} - {(None, None)}
        if len(current) > 1 and when(ranked[0]) > float("-inf"):  # without sample times, nothing says "at once"
            report.shared += 1
            return min(latest, key=lambda s_: rank(s_)[1]), True
        pods = {workload_of(s_.get("metric") or {}, ctx.exporter_pods) for s_ in series_list} - {(None, None)}
        if rank(ranked[0]) == rank(ranked[1]):
            report.duplicates += 1  # two series at once that nothing orders: two exporters for one device?
        elif len(pods) > 1:
            report.pod_changes += 1
        return ranked[0], False


def _matchers(selector: str, extra: str) -> str:
    """`{a="x"}` + `b=~"y"` -> `{a="x", b=~"y"}`."""
    inner = [m for m in (selector.strip().strip("{}").strip(), extra) if m]
    return "{" + ", ".join(inner) + "}" if inner else ""


def _alternatives(values: Collection[str]) -> str:
    """A PromQL regex matching exactly these label values (RE2 syntax, escaped for a double-quoted string)."""
    regex = "|".join(re.escape(v) for v in sorted(values))
    return regex.replace("\\", "\\\\").replace('"', '\\"')


def _origin(labels: Mapping[str, str], ctx: Context) -> tuple[Any, ...]:
    """Which pod a series is about and which exporter reported it: what changes when a device changes hands."""
    return workload_of(labels, ctx.exporter_pods), labels.get("instance", "")


def _unplaced(labels: Mapping[str, str], ctx: Context) -> str:
    """The host label that failed to name a Node (for the message), or "" when there is none."""
    if ctx.is_node is None or first_label(labels, *RELABELLED_NODE_LABELS):
        return ""
    return first_label(labels, *HOST_LABELS, *INSTANCE_LABELS)
