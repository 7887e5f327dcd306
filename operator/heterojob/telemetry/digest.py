"""The aggregate read of one Prometheus (national scale): figures grouped by Prometheus, devices only where needed.

Step of the pipeline: between `telemetry.prometheus` (asking) and `telemetry.snapshot.build` (the snapshot), for
fleets too large to pull every device's series every cycle (`collect.DEVICE_ROWS_MAX`). A cycle is:
1. four queries whatever the fleet's size: `pods`, every pod's (and every node's idle devices') device count and
   mean utilization, grouped server-side (two sums per raw label group, then per node and pod; one series per pod,
   both figures in its value, `pack`); `flags`, one series per device that needs a row of its own (a nonzero XID,
   an XID count, hot, NPU health not 1, network or link down; every SHAPE_EVERY-th read also no health signal, a
   device without an identity series, a device with two identity series: `flags_query`); `rules`, which recording
   rules the source evaluates (`telemetry.recording`: when it does, `pods` and the fault flags read the recorded
   series instead); and `up` (only the targets that are down, the exporter pods' names and their Nodes). `pods`
   is left out when the caller reuses earlier figures (`Figures`); `hot` and `network` are asked in instant form,
   and only when some device is hot or down now, windowed for its nodes (`confirm`);
2. only when a node reports fewer devices than in the last read (or on the first read, in round 1): `vanished`,
   the identity series gone since the window began, with their labels;
3. only when some node is flagged (or holds a device the last snapshot found anomalous): the per-device queries of
   `telemetry.snapshot.queries`, restricted to those nodes' series (`restrict`) and asked as one query, then their
   follow-ups (`seen`, `fallback`) likewise: the same parse as a per-device read, for those nodes only.
A node the `pods` answer cannot place (its series name no Node) or more flagged nodes than `DRILL_MAX` make the
read a per-device one (`snapshot.gather`): the figures stay exact, only the cost is today's.

Pure: plain vectors in and out; `ask` is the caller's.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any
from dataclasses import dataclass, field

from heterojob.telemetry import snapshot as snap
from heterojob.telemetry.snapshot import PodFigures
from heterojob.telemetry import steps
from heterojob.telemetry.adapters import ADAPTERS
from heterojob.telemetry.family import Adapter, Vector
from heterojob.telemetry.labels import (
    EXPORTER_POD_LABELS, HOST_LABELS, INSTANCE_LABELS, JOB_LABELS, LOCATION_LABELS, NODE_LABEL, POD_LABELS,
    RELABELLED_NODE_LABELS, Context,
    node_of_series, with_node_label, workload_of,
)
from heterojob.telemetry.model import DeviceSample, Health, HealthPolicy, number

log = logging.getLogger("heterojob.telemetry")

PODS = "pods"
FLAGS = "flags"
POD_LABEL = "heterojob_pod"  # POD_LABELS and `job` joined with "|", in that order
FLAG_LABEL = "heterojob_flag"  # why a device needs a row of its own
QUERY_LABEL = "heterojob_query"  # names the query of each part of a merged one
PART_LABEL = "heterojob_part"  # tells a group's utilization sum from its device count until they are added
NAME_LABEL = "heterojob_name"  # a flagged series' metric name (a recording rule replaces __name__)
PACK = 1000  # a `pods` value: devices + PACK x devices with a utilization + their sum / PACK_SUM (< 1000 devices)
PACK_SUM = 1e6  # utilization sums (< 100,000) in the fraction: to 1e-4 of a percent
# Shape flags: a device with two identity series (a pod change in the window, two exporters, a shared device:
# `doubled`, its key labels, then `double`, its series), a scrape target whose devices with an identity series and
# devices with a health signal differ in number (`signal`: one without a health signal, one without an identity
# series). They follow deployments, not faults: asked every SHAPE_EVERY-th read, their nodes read per device until a
# later ask no longer finds them. Counted and compared by Prometheus per scrape target (cheap: no join per device).
SHAPES = frozenset({"doubled", "signal"})
DOUBLE = "double"
DOUBLED_MAX = 2048  # doubled devices whose series are asked by their keys; beyond, with a join over every device
SHAPE_EVERY = 4
VANISH_S = 60  # an identity series seen in this long before the window and not in it: a vanished device's row
DRILL_MAX = 256  # flagged nodes asked per device in one regex; beyond, the whole source is read per device
# the `up` answer an aggregate read needs: targets that are down (their node), exporter pods (a `pod` label on a
# device series that names one is the exporter's, not a workload's) and their Nodes, and the step rates
UP_QUERY = ('(up == 0) or group by (namespace, pod) (up{pod!=""}) or '
            + snap.UP_QUERY.split(" or ", 1)[1])


# Recorded series (`telemetry.recording`, manifests/telemetry/heterojob-recording-rules.yaml): the same PromQL as
# `pods_query` and the FAULTS of `flags_query`, evaluated by Prometheus' rule manager, and a series saying which
# window and hot threshold they were written for
PODS_RECORD = "heterojob:pods:packed"
FLAGS_RECORD = "heterojob:flags:faults"
RULES_RECORD = "heterojob:rules:info"
RULES = "rules"
WINDOW_LABEL = "heterojob_window_s"
HOT_LABEL = "heterojob_hot_celsius"


@dataclass(frozen=True)
class Recorded:
    """The recording rules a source evaluates: for which window and from which temperature they flag `hot`."""

    window_s: int
    hot_celsius: float


@dataclass(frozen=True)
class Figures:
    """A `pods` answer as read (before the drilled nodes' pods are dropped): reused by later reads of the source
    instead of asking it again (`Collector`: for one window, unless a running job's pod is missing from it)."""

    pods: Mapping[tuple[str, str], PodFigures]
    idle: Mapping[str, int]
    counts: Mapping[str, int]


@dataclass
class Digest:
    """What an aggregate read of one source found beside the per-device rows of its flagged nodes."""

    drilled: frozenset[str] = frozenset()  # nodes read per device this cycle (their rows are in the results)
    pods: dict[tuple[str, str], PodFigures] = field(default_factory=dict)
    idle: dict[str, int] = field(default_factory=dict)  # node -> devices reporting that serve no pod (or aggregated)
    vanished: list[DeviceSample] = field(default_factory=list)  # identity series gone within VANISH_S
    shaped: frozenset[str] = frozenset()  # nodes a shape flag names (kept until the next read that asks them)
    where: dict[str, tuple[str, str]] = field(default_factory=dict)  # node -> (label, value) that selects its series
    counts: dict[str, int] = field(default_factory=dict)  # node -> devices with an identity series (all nodes)
    rules: Recorded | None = None  # the recording rules the source evaluates (read instead, next time)
    figures: Figures | None = None  # the `pods` figures this read asked or reused (None: read per device)


def pack_decode(value: float) -> tuple[int, float | None]:
    """(devices, mean utilization or None) from a `pods` value: devices + 1000 x devices with a utilization +
    the sum of their utilizations / PACK_SUM (`pods_query`)."""
    whole = math.floor(value)
    devices, with_util = int(whole % PACK), int(whole // PACK)
    total = (value - whole) * PACK_SUM
    return devices, (round(total / with_util, 3) if with_util else None)


def identity_series(a: Adapter, window_s: int) -> str:
    """The identity role's windowed series as they are (every label kept), alternatives joined with `or`."""
    return "(" + " or ".join(alt.expr("", window_s) for alt in (a.roles[a.identity], *a.identity_alternatives)) + ")"


def pods_query(window_s: int, adapters: Iterable[Adapter] = ADAPTERS.values()) -> str:
    """PromQL: per node and pod labels (grouped by the raw labels first, the node and pod labels computed on the
    groups: a few per node, not one per device), the devices with an identity series, how many of them have a
    utilization (a value outside 0..100, an exporter's "not collected", is none) and the sum of those, packed in
    one value: each device adds 1, plus PACK + its utilization / PACK_SUM when it has one. Two sums per raw group
    (the valid utilizations, the devices), added together per group: the identity series are read twice, and
    never joined series by series (`or` over every device costs Prometheus more than a second read)."""
    raw = ", ".join(dict.fromkeys((*LOCATION_LABELS, *POD_LABELS)))
    pods = ", ".join(f'"{label}"' for label in (*POD_LABELS, *JOB_LABELS))
    parts = []
    for a in adapters:
        u = identity_series(a, window_s)
        valid = f'label_replace(sum by ({raw}) (({u} >= 0 <= 100) / {PACK_SUM:g} + {PACK:g}), "{PART_LABEL}", "u", "", "")'
        per_group = f"sum by ({raw}) ({valid} or count by ({raw}) ({u}))"
        grouped = f'label_join({per_group}, "{POD_LABEL}", "|", {pods})'
        parts.append(f"sum by ({NODE_LABEL}, {POD_LABEL}) ({with_node_label(grouped)})")
    return " or ".join(parts)


def _tag(expr: str, why: str) -> str:
    """`expr` (a filter: few series) tagged with why. Inside `max without ()`, which keeps every label but the name:
    VictoriaMetrics keeps the series a filter rejects, as NaN, up to the query's end, so without an aggregation
    every `or` and label_replace above it worked on every device's series (3x Prometheus' CPU on `flags`; with it,
    about 1x). Prometheus drops them at the filter: the aggregation costs it nothing."""
    return f'label_replace(max without () ({expr}), "{FLAG_LABEL}", "{why}", "", "")'


FAULTS = frozenset({"xid", "xid_count", "hot", "health", "network"})  # what a device's own series says
VANISHED = "vanished"
# the fault flags computed even where recording rules hold them: a fatal XID reaches its job in the cycle it is
# scraped in, not up to an evaluation interval later (instant selectors: cheap); the others may wait for the rules
URGENT = frozenset({"xid", "xid_count"})
# windowed flags asked first in their instant form, a superset (a series hot over the window is hot at its last
# sample): instant selectors cost Prometheus about 30% less per series than functions over a window (50% in a
# live head); the windowed flag is then asked only of the candidates' nodes (CONFIRM), so it says the same
NOW = {"hot": "hot_now", "network": "network_now"}
LOOKBACK_S = 300  # Prometheus' default lookback: an instant selector sees a window no longer than this
CONFIRM = "confirm"


def signal_series(a: Adapter, window_s: int) -> str:
    """A device's health signal over the window, the series `signal` counts beside the identity series: the
    temperature (GPUs), the health (NPU chips)."""
    role = a.roles["health"] if "health" in a.roles else a.roles["temp"]
    return " or ".join(f"last_over_time({m}[{window_s}s])" for m in role.names)


def doubled_query(window_s: int, keys: Mapping[str, Mapping[str, Collection[str]]],
                  adapters: Iterable[Adapter] = ADAPTERS.values()) -> str:
    """PromQL: the identity series of the devices `doubled` named by keys only (family -> key label -> values),
    tagged DOUBLE: selected by those keys (a join over every device past DOUBLED_MAX)."""
    parts = []
    for a in adapters:
        mine = keys.get(a.family)
        if not mine:
            continue
        if sum(map(len, mine.values())) > DOUBLED_MAX:
            parts.append(flags_query(window_s, 0, adapters=[a], only={DOUBLE}))
            continue
        restricted = restrict(identity_series(a, window_s), metrics([a]), mine)
        parts.append(f'label_replace({_tag(restricted, DOUBLE)}, "{snap.ROLE_LABEL}", "{a.family}", "", "")')
    return " or ".join(parts)


def flags_query(window_s: int, hot_celsius: float, vanish_s: int = VANISH_S,
                adapters: Iterable[Adapter] = ADAPTERS.values(), shapes: bool = True,
                only: Collection[str] | None = None) -> str:
    """PromQL: the series of every device that needs a row of its own, as they are, tagged with FLAG_LABEL.
    `shapes`: also the exporters' shape flags (`SHAPES`: they change with deployments, not with faults).
    `only`: just these flags (FAULTS, VANISHED, SHAPES), whatever `shapes` says."""
    parts = []
    for a in adapters:
        keys = ", ".join(a.key_labels)
        u = identity_series(a, window_s)
        r = a.roles
        older = " or ".join(f"last_over_time({alt.metric}{alt.selector}[{vanish_s}s] offset {window_s}s)"
                            for alt in (r[a.identity], *a.identity_alternatives))
        target = ", ".join(dict.fromkeys((*LOCATION_LABELS, *EXPORTER_POD_LABELS)))
        signal = signal_series(a, window_s)
        counted = (f'sum by ({target}) (label_replace(count by ({target}) ({u}), "{PART_LABEL}", "u", "", "") '
                   f"or -count by ({target}) ({signal})) != 0")
        mine = [_tag(f"{u} and on ({keys}) (count by ({keys}) {u} > 1)", DOUBLE),
                _tag(f"count by ({keys}) ({u}) > 1", "doubled"), _tag(counted, "signal"),
                _tag(f"({older}) unless on ({keys}) {u}", VANISHED),
                # each name filtered before `or`: a join of the few hot series, not of every device's
                _tag(" or ".join(f"{r['temp'].fn}({m}[{window_s}s]) >= {hot_celsius:g}" for m in r["temp"].names), "hot"),
                _tag(" or ".join(f"{m} >= {hot_celsius:g}" for m in r["temp"].names), NOW["hot"])]
        if a.family == "dcgm":
            xid = '{__name__=~"' + "|".join(r["xid"].names) + '"}'
            # two names of one device's XID (1.x's beside today's) differ by their name only: kept as a label
            named = f'label_replace({xid} > 0, "{NAME_LABEL}", "$1", "__name__", "(.+)")'
            mine += [_tag(named, "xid"), _tag(f"{r['xid_count'].metric} > 0", "xid_count")]
        else:
            health = r["health"].expr("", window_s)
            network = " or ".join(f"max_over_time({r[role].metric}[{window_s}s]) == 0" for role in ("network", "link"))
            now = " or ".join(f"{r[role].metric} == 0" for role in ("network", "link"))
            mine += [_tag(f"{health} != 1", "health"), _tag(f"({network})", "network"), _tag(f"({now})", NOW["network"])]
        for p in mine:
            why = re.search(rf'"{FLAG_LABEL}", "(\w+)", "", ""\)$', p).group(1)  # type: ignore[union-attr]  # every tagged part names its flag
            if (why in only) if only is not None else (shapes or why not in SHAPES):
                parts.append(f'label_replace({p}, "{snap.ROLE_LABEL}", "{a.family}", "", "")')
    return " or ".join(parts)


def first_round(window_s: int, hot_celsius: float, steps_window_s: int = steps.STEPS_WINDOW_S,
                adapters: Iterable[Adapter] = ADAPTERS.values(), shapes: bool = True, vanished: bool = True,
                rules: Recorded | None = None, ask_pods: bool = True) -> dict[str, str]:
    """The first round's queries. `vanished`: ask the vanished flag now (no earlier counts to compare with).
    `ask_pods`: ask the `pods` figures (False: the caller reuses earlier ones, `Figures`).
    `rules`: the recording rules this source evaluates (`telemetry.recording`): their series are read instead of
    the figures and fault flags they hold, the rest (a lower hot threshold, shapes, vanished) computed as usual."""
    adapters = list(adapters)
    extra = {*(SHAPES if shapes else ()), *((VANISHED,) if vanished else ())}
    if rules is not None and rules.window_s == window_s:
        mine = f'{{{WINDOW_LABEL}="{window_s}", {HOT_LABEL}="{rules.hot_celsius:g}"}}'  # not other rules' series
        pods = f'sum by ({NODE_LABEL}, {POD_LABEL}) ({PODS_RECORD}{{{WINDOW_LABEL}="{window_s}"}})'  # without __name__
        extra |= URGENT
        if hot_celsius < rules.hot_celsius:  # a job calls cooler devices hot than the rules do
            extra.add("hot")
        flags = f"{FLAGS_RECORD}{mine} or {flags_query(window_s, hot_celsius, adapters=adapters, only=extra)}"
    else:
        pods = pods_query(window_s, adapters)
        now = (FAULTS - NOW.keys()) | set(NOW.values()) if window_s <= LOOKBACK_S else FAULTS
        flags = flags_query(window_s, hot_celsius, adapters=adapters, only=now | extra)
    return {**({PODS: pods} if ask_pods else {}), FLAGS: flags, RULES: RULES_RECORD,
            snap.UP: f"{UP_QUERY} or {steps.query(steps_window_s)}"}


def recorded(vector: Vector) -> Recorded | None:
    """The recording rules a source evaluates, from the RULES answer (None: none)."""
    for series in vector or ():
        labels = series.get("metric") or {}
        window, hot = number(labels.get(WINDOW_LABEL)), number(labels.get(HOT_LABEL))
        if window is not None and hot is not None:
            return Recorded(int(window), hot)
    return None


def selector_of(labels: Mapping[str, str], ctx: Context) -> tuple[str, str] | None:
    """(label, value) that selects every series of the node a series is on, in `node_of_series`' order."""
    get = labels.get
    for name in RELABELLED_NODE_LABELS:
        if value := get(name):
            return name, value
    if ctx.pod_nodes and (pod := get("pod")) and ctx.pod_nodes.get((get("namespace") or "", pod)):
        return "pod", pod
    for name in (*HOST_LABELS, *JOB_LABELS, *INSTANCE_LABELS):
        if (value := get(name)) and node_of_series({name: value}, ctx):
            return name, value
    return None


def restrict(query: str, metrics: Collection[str], where: Mapping[str, Collection[str]]) -> str:
    """`query` with every selector of `metrics` (and every `{__name__=~...}`) limited to series whose label in
    `where` has one of its values; several labels: one copy per label, joined with `or`."""
    names = "|".join(re.escape(m) for m in sorted(metrics, key=len, reverse=True))
    token = re.compile(rf'(?<![\w"|])({names})(?![\w"|])(\{{[^}}]*\}})?')
    copies = []
    for label, values in sorted(where.items()):
        matcher = f'{label}=~"{_alternatives(values)}"'

        def add(m: re.Match[str], matcher: str = matcher) -> str:
            inner = (m.group(2) or "{}")[1:-1].strip()
            return m.group(1) + "{" + (f"{inner}, " if inner else "") + matcher + "}"

        def add_name(m: re.Match[str], matcher: str = matcher) -> str:
            return "{" + m.group(1) + m.group(2) + f", {matcher}" + "}"

        out = re.sub(r'\{(__name__=~"[^"]*")([^}]*)\}', add_name, query)
        copies.append(token.sub(add, out))
    return " or ".join(f"({c})" for c in copies) if len(copies) > 1 else copies[0]


def _alternatives(values: Collection[str]) -> str:
    regex = "|".join(re.escape(v) for v in sorted(values))
    return regex.replace("\\", "\\\\").replace('"', '\\"')


def merged(queries: Mapping[str, str]) -> str:
    """One PromQL for several, each answer's series tagged with QUERY_LABEL (split by `split_merged`)."""
    return " or ".join(f'label_replace({q}, "{QUERY_LABEL}", "{name}", "", "")' for name, q in queries.items())


def split_merged(vector: Vector, names: Iterable[str]) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {name: [] for name in names}
    for series in vector:
        labels = dict(series.get("metric") or {})
        name = labels.pop(QUERY_LABEL, "")
        if name in out:
            out[name].append({"metric": labels, "value": series.get("value")})
    return out


def metrics(adapters: Iterable[Adapter]) -> set[str]:
    """Every metric name the per-device queries read (what `restrict` limits)."""
    out: set[str] = set()
    for a in adapters:
        for r in (*a.roles.values(), *a.identity_alternatives, *((a.fallback_identity,) if a.fallback_identity else ())):
            out.update(r.names)
            out.update(re.findall(r"\b(?:DCGM_\w+|dcgm_\w+|npu_\w+|container_npu_\w+)", r.param))
    return out


def confirm(ask: Callable[[Mapping[str, str]], Mapping[str, Vector]], candidates: Iterable[Mapping[str, Any]],
            ctx: Context, window_s: int, hot: float, adapters: list[Adapter]) -> list[Mapping[str, Any]]:
    """The windowed `hot` and `network` flags of the candidates' nodes (every node's when one names none)."""
    whys = {why for why, now in NOW.items() for x in candidates if (x.get("metric") or {}).get(FLAG_LABEL) == now}
    query = flags_query(window_s, hot, adapters=adapters, only=whys)
    by_label: dict[str, set[str]] = {}
    for x in candidates:
        selector = selector_of(x.get("metric") or {}, ctx) if node_of_series(x.get("metric") or {}, ctx) else None
        if selector is None:
            by_label = {}
            break
        by_label.setdefault(selector[0], set()).add(selector[1])
    return list(ask({CONFIRM: restrict(query, metrics(adapters), by_label) if by_label else query}).get(CONFIRM) or ())


def anomalous(d: DeviceSample) -> bool:
    return d.health in (Health.FAILED, Health.DEGRADED, Health.UNKNOWN) or bool(d.network_fault)


def read(ask: Callable[[Mapping[str, str]], Mapping[str, Vector]], window_s: int, policy: HealthPolicy,
         nodes: Mapping[str, snap.NodeFacts], previous: Mapping[str, DeviceSample],
         where: Mapping[str, tuple[str, str]], hot_celsius: float | None = None,
         steps_window_s: int = steps.STEPS_WINDOW_S, adapters: Iterable[Adapter] = ADAPTERS.values(),
         shaped: Collection[str] | None = None, counts: Mapping[str, int] | None = None,
         rules: Recorded | None = None, figures: Figures | None = None,
         vanish_s: int = VANISH_S) -> tuple[dict[str, Vector], Digest | None, int]:
    """(answers for `snapshot.build`, the digest or None when the source was read per device, queries asked).
    `where`: node -> (label, value) selecting its series, learnt in earlier reads (for remembered anomalies).
    `shaped`: the nodes shape flags named in an earlier read, or None to ask the shape flags now.
    `counts`: the devices per node the last read found (`Digest.counts`); a node reporting fewer now has its
    vanished devices asked (a second round); None: asked in the first round.
    `rules`: the recording rules the last read found at this source (`Digest.rules`), read instead of computing.
    `figures`: an earlier read's `pods` figures to reuse instead of asking `pods` (`Digest.figures`; the fault flags
    are asked all the same). `vanish_s`: `vanished`'s lookback when counts drop (as old as `counts` may be)."""
    adapters = list(adapters)
    hot = policy.overheat_celsius if hot_celsius is None else min(hot_celsius, policy.overheat_celsius)

    def first_answers(rules: Recorded | None) -> tuple[Mapping[str, Vector], int]:
        first = first_round(window_s, hot, steps_window_s, adapters, shapes=shaped is None,
                            vanished=counts is None, rules=rules, ask_pods=figures is None)
        return ask(first), len(first)

    answered, asked = first_answers(rules)
    found = recorded(answered.get(RULES) or ())
    if rules is not None and found != rules:  # the rules changed or are gone: computed, this cycle
        log.info("telemetry recording rules %s: computing their figures", "changed" if found else "gone")
        answered, n = first_answers(None)
        asked += n

    def per_device(why: str) -> tuple[dict[str, Vector], None, int]:
        log.info("telemetry read per device: %s", why)
        results, n = snap.gather(ask, window_s, adapters, steps_window_s)
        return results, None, asked + n

    ctx = snap.context(answered.get(snap.UP) or (), nodes)
    digest = Digest(where=dict(where), rules=found if found is not None and found.window_s == window_s else None)
    if figures is not None:
        digest.pods, digest.idle, digest.counts = dict(figures.pods), dict(figures.idle), dict(figures.counts)
    for series in answered.get(PODS) or ():
        labels = series.get("metric") or {}
        parts = (labels.get(POD_LABEL) or "").split("|")
        pod_labels = {k: v for k, v in zip((*POD_LABELS, *JOB_LABELS), parts, strict=False) if v}
        # the node as `node_of_series` reads it: a relabelled node label or the host label, else the scrape
        # target pod's Node (kube_pod_info), else `job` when it names a Node
        node = ctx.node_named(labels.get(NODE_LABEL, "")) or ctx.pod_nodes.get(
            (pod_labels.get("namespace", ""), pod_labels.get("pod", "")), "") or (
            ctx.node_named(pod_labels.get("job", "")) if ctx.is_node is not None else "")
        value = number((series.get("value") or [None, None])[1])
        if not node or value is None:  # series that name no Node: only the per-device read places them
            return per_device(f"the series of {labels.get(NODE_LABEL) or 'some devices'} name no Node")
        n, util = pack_decode(value)
        digest.counts[node] = digest.counts.get(node, 0) + n
        namespace, pod = workload_of(pod_labels, ctx.exporter_pods)
        if namespace is None or pod is None:
            digest.idle[node] = digest.idle.get(node, 0) + n
            continue
        held = digest.pods.get((namespace, pod))
        if held is not None:  # one pod reported under two label sets (two exporters?): read it per device
            return per_device(f"pod {namespace}/{pod} is reported by two exporters")
        digest.pods[(namespace, pod)] = PodFigures(node, n, util)
    digest.figures = figures if figures is not None else Figures(dict(digest.pods), dict(digest.idle),
                                                                  dict(digest.counts))
    flagged: set[str] = set(n for n in shaped or () if n in where)
    shape_nodes: set[str] = set()
    by_family = {a.family: a for a in adapters}
    flag_series = list(answered.get(FLAGS) or ())
    if counts is not None and any(digest.counts.get(n, 0) < c for n, c in counts.items()):
        # a node reports fewer devices than last time: which identity series vanished (and from which node)
        more = {VANISHED: flags_query(window_s, hot, vanish_s, adapters=adapters, only={VANISHED})}
        flag_series += ask(more).get(VANISHED) or ()
        asked += 1
    doubled: dict[str, dict[str, set[str]]] = {}  # family -> key label -> values of devices `doubled` named

    def flag(series: Mapping[str, Any]) -> str | None:
        """Flags the node of one flagged series; a reason to read the source per device instead, or None."""
        labels = series.get("metric") or {}
        why = labels.get(FLAG_LABEL)
        adapter = by_family.get(labels.get(snap.ROLE_LABEL, ""))
        value = number((series.get("value") or [None, None])[1])
        if adapter is None or (why == "xid" and int(value or 0) not in policy.fatal_xids) or (
                why == "xid_count" and int(number(labels.get("xid")) or 0) not in policy.fatal_xids):
            return None
        node = node_of_series(labels, ctx)
        selector = selector_of(labels, ctx) if node else None
        if why == "doubled" and selector is None:  # keys only (a GPU's UUID): its series are asked next
            key = next((k for k in adapter.key_labels if labels.get(k)), None)
            if key is not None:
                doubled.setdefault(adapter.family, {}).setdefault(key, set()).add(labels[key])
                return None
        if not node or selector is None:
            return f"a flagged device ({why}) names no Node"
        digest.where[node] = selector
        flagged.add(node)
        if why in SHAPES or why == DOUBLE:
            shape_nodes.add(node)
        if why == VANISHED and (device := adapter.device_id(labels, ctx)) is not None:
            namespace, pod = workload_of(labels, ctx.exporter_pods)
            digest.vanished.append(DeviceSample(device, node, adapter.family, index=labels.get("gpu") or labels.get(
                "id", ""), namespace=namespace, pod=pod, health=Health.HEALTHY))
        return None

    candidates = [x for x in flag_series if (x.get("metric") or {}).get(FLAG_LABEL) in NOW.values()]
    if candidates:  # the windowed flags of the nodes whose devices are hot or down now (`NOW`)
        flag_series = [x for x in flag_series if x not in candidates]
        flag_series += confirm(ask, candidates, ctx, window_s, hot, adapters)
        asked += 1
    for series in flag_series:
        if why := flag(series):
            return per_device(why)
    if doubled:  # the series of the devices held twice, selected by their keys: where they are
        for series in ask({DOUBLE: doubled_query(window_s, doubled, adapters)}).get(DOUBLE) or ():
            if why := flag(series):
                return per_device(why)
        asked += 1
    # nodes holding a device the last snapshot found anomalous, of this source (it has their selector): read per
    # device again, so a recovery shows and a vanished device stays remembered
    flagged |= {d.node for d in previous.values() if anomalous(d) and d.node in where}
    digest.shaped = frozenset(shape_nodes) if shaped is None else frozenset(n for n in shaped if n in where)
    if not flagged:
        return {snap.UP: answered.get(snap.UP) or ()}, digest, asked
    if len(flagged) > DRILL_MAX:
        return per_device(f"{len(flagged)} nodes need per-device rows (more than {DRILL_MAX})")
    if unknown := sorted(n for n in flagged if n not in digest.where):
        return per_device(f"no selector known for node(s) {', '.join(unknown[:3])}")
    by_label: dict[str, set[str]] = {}
    for node in flagged:
        label, selected = digest.where[node]
        by_label.setdefault(label, set()).add(selected)
    names = metrics(adapters)
    drill = {k: restrict(q, names, by_label) for k, q in snap.queries(window_s, adapters, steps_window_s).items()
             if k != snap.UP}
    results: dict[str, Vector] = dict(split_merged(ask({"drill": merged(drill)}).get("drill") or (), drill))
    asked += 1
    more = {k: restrict(q, names, by_label) for k, q in snap.followups(results, adapters, window_s).items()}
    if more:
        results.update(split_merged(ask({"more": merged(more)}).get("more") or (), more))
        asked += 1
    results[snap.UP] = answered.get(snap.UP) or ()
    digest.drilled = frozenset(flagged)
    for node in flagged:
        digest.idle.pop(node, None)
    digest.pods = {k: v for k, v in digest.pods.items() if v.node not in flagged}
    return results, digest, asked

