"""Which labels place a series: the node it is on and the workload it is about.

The node is read from the labels real scrape configurations give (docs/telemetry.md, "node"): a relabelled node
label, the scrape target pod's Node (kube-state-metrics), the exporter's own host label, `job` or the scrape
target's host, the last three only when they name a Node. `with_node_label` is the same order in PromQL, for
readers that group by node in Prometheus (the console's heat map).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from heterojob.telemetry.model import SHARED_POD


@dataclass(frozen=True)
class Context:
    """What the parse needs beyond the answers: which nodes exist and which pods are the exporters."""

    is_node: Callable[[str], bool] | None = None  # None: no Node list (labels only, e.g. the CLI)
    exporter_pods: frozenset[tuple[str, str]] = frozenset()  # (namespace, pod) of scrape targets (`up`)
    node_at: Mapping[str, str] = field(default_factory=dict)  # a Node's address (InternalIP, ...) -> its name
    pod_nodes: Mapping[tuple[str, str], str] = field(default_factory=dict)  # a scrape target pod -> its Node

    def node_named(self, name: str) -> str:
        """The Node `name` names (its name, or one of its addresses), "" when none; without a Node list, `name`."""
        if not name or self.is_node is None:
            return name
        return name if self.is_node(name) else self.node_at.get(name, "")


# Where a series' node is read, most trusted first (docs/telemetry.md, "node"; `node_of_series`):
# 1. a label a scrape configuration copies from the target's Node (__meta_kubernetes_pod_node_name or
#    __meta_kubernetes_endpoint_node_name), taken as it is: `exported_node` (a series' own `node`, renamed because
#    a federating or second scrape added its own), `node` (manifests/telemetry; prometheus-community/prometheus's
#    kubernetes-pods and -service-endpoints jobs), `kubernetes_node` (the older stable/prometheus chart; NVIDIA's
#    GPU operator docs), `node_name` (promtail / Grafana Agent style configs), `nodename` (the relabelings example
#    of dcgm-exporter's Helm chart and of kube-prometheus-stack's exporters), `kubernetes_pod_node_name` (older
#    example kubernetes-pods jobs), `k8s_node_name` (OpenTelemetry's k8s.node.name written to Prometheus);
RELABELLED_NODE_LABELS = ("exported_node", "node", "kubernetes_node", "node_name", "nodename",
                          "kubernetes_pod_node_name", "k8s_node_name")
# 2. the scrape target's pod (`namespace`, `pod`: a ServiceMonitor's or PodMonitor's) through kube-state-metrics'
#    kube_pod_info, which `snapshot.UP_QUERY` joins to `up` (Context.pod_nodes);
EXPORTER_POD_LABELS = ("namespace", "pod")
# 3. dcgm-exporter's own host label: the Node's name only when the exporter's NODE_NAME is set (else its pod's
#    name), so only when it names a Node (by name or address);
HOST_LABELS = ("Hostname", "hostname")
# 4. `job`, only when it names a Node: npu-exporter's documented Prometheus job (mind-cluster docs, "Using with
#    Prometheus") writes __meta_kubernetes_pod_node_name into `job`;
JOB_LABELS = ("job",)
# 5. the scrape target's host (`exported_instance` behind a federation or honor_labels: false, where `instance`
#    is the federating Prometheus; then `instance`), when it names a Node by name (kube-prometheus relabels
#    `instance` to the node) or by one of its addresses (an exporter on the host network, a static config).
INSTANCE_LABELS = ("exported_instance", "instance")
# The workload's pod. With honorLabels: false the exporter's pod/namespace arrive as exported_*, and
# pod/namespace name the exporter itself; dcgm-exporter --use-old-namespace says pod_name/pod_namespace.
POD_LABELS = ("exported_namespace", "exported_pod", "namespace", "pod", "pod_namespace", "pod_name")
LOCATION_LABELS = (*RELABELLED_NODE_LABELS, *HOST_LABELS, *JOB_LABELS, *INSTANCE_LABELS)
# Every label that can say where a series comes from (kept for readers grouping by location, e.g. the console;
# which one wins is `node_of_series`'s business).
NODE_LABELS = (*HOST_LABELS, *RELABELLED_NODE_LABELS, *INSTANCE_LABELS)


def first_label(labels: Mapping[str, str], *names: str) -> str:
    get = labels.get
    for name in names:
        if value := get(name):
            return value
    return ""


def host_of(instance: str) -> str:
    """A scrape target's host: `host:port`, `[v6]:port`, `host` or a URL -> host."""
    rest = instance.split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def node_of_series(labels: Mapping[str, str], ctx: Context | Callable[[str], bool] | None = None) -> str:
    """The node of a series, in the order of the labels above: a relabelled node label as it is; the scrape
    target pod's Node (kube_pod_info); then Hostname/hostname, `job` and the scrape target's host
    (`exported_instance`, then `instance`), each only when it names a Node by name or address (without a Node
    list: Hostname and the host as they are, never `job`)."""
    ctx = ctx if isinstance(ctx, Context) else Context(is_node=ctx)
    get = labels.get
    for name in RELABELLED_NODE_LABELS:
        if node := get(name):
            return node
    if ctx.pod_nodes and (node := ctx.pod_nodes.get((get("namespace") or "", get("pod") or ""), "")):
        return node
    if node := ctx.node_named(first_label(labels, *HOST_LABELS)):
        return node
    if ctx.is_node is not None and (node := ctx.node_named(first_label(labels, *JOB_LABELS))):
        return node
    for name in INSTANCE_LABELS:
        if node := ctx.node_named(host_of(get(name) or "")):
            return node
    return ""


# The node `with_node_label` resolves in PromQL: what `node_of_series` reads, as one label to group by.
NODE_LABEL = "heterojob_node"


def with_node_label(expr: str) -> str:
    """PromQL: `expr` with NODE_LABEL set to each series' node as `node_of_series` reads it without a Node list
    (a relabelled node label, else Hostname/hostname, else the host of exported_instance, then of instance, as
    `host_of` reads it: `host:port`, `[v6]:port`, `host`, a bare IPv6 address, or any of those in a URL), so a sum
    or average per node counts the node's devices once, whichever exporter or scrape target reported them. The
    labels are joined in that order and the first one set is kept (one label_join and one label_replace:
    Prometheus caches both per series)."""
    order = ", ".join(f'"{label}"' for label in (*RELABELLED_NODE_LABELS, *HOST_LABELS, *INSTANCE_LABELS))
    # backslashes doubled for the PromQL string
    regex = NODE_FIELD_RE.replace("\\", "\\\\")
    return f'label_replace(label_join({expr}, "{NODE_LABEL}", "|", {order}), "{NODE_LABEL}", "$1$2$3", ' \
           f'"{NODE_LABEL}", "{regex}")'


# `host_of` in RE2 (no lookaround; Go's leftmost-first alternation, anchored by label_replace) over the joined
# labels: skip empty fields; in the first one set, drop a scheme (up to its first '://'); then the host is the
# inside of `[v6]` ($1), else what precedes the port when exactly one ':' comes before the path or field end ($2),
# else all of it up to the path (a bare IPv6 address, a host without port, a node name: $3). A node name has no
# '|', ':', '/' or '['.
NODE_FIELD_RE = (r"[|]*(?:[^|]*?://)?"
                 r"(?:\[([^|\]/]*)(?:\][^|/]*)?|([^|:/]*):[^|:/]*|([^|/]*))"
                 r"(?:[/|].*)?")


def workload_of(labels: Mapping[str, str], exporter_pods: frozenset[tuple[str, str]] = frozenset()
                ) -> tuple[str | None, str | None]:
    """(namespace, pod) of the workload a series is about, or (None, None).

    `exported_*` first (honorLabels: false); `pod`/`namespace` unless they name a scrape target (the exporter);
    npu-exporter's not_displayed_for_multi_pod is no pod at all.
    """
    if labels.get("exported_pod"):
        namespace, pod = labels.get("exported_namespace") or "", labels["exported_pod"]
    elif labels.get("pod_name"):  # npu-exporter; dcgm-exporter --use-old-namespace (no collision with `pod`)
        namespace, pod = first_label(labels, "exported_namespace", "pod_namespace", "namespace"), labels["pod_name"]
    elif labels.get("pod"):
        namespace, pod = labels.get("namespace") or "", labels["pod"]
        if (namespace, pod) in exporter_pods:
            return None, None
    else:
        return None, None
    if not pod or pod == SHARED_POD or namespace == SHARED_POD:
        return None, None
    return namespace or None, pod


def shared(labels: Mapping[str, str]) -> bool:
    return SHARED_POD in (labels.get("pod_name"), labels.get("pod"), labels.get("exported_pod"))
