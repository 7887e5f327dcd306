"""More of what an SRE operating HeteroJobs and the fleet types, run with the real `kubectl` against the emulator.

Beside test_kubectl_conformance.py (same runner: the kubectl on PATH and those in $HETEROJOB_KUBECTLS). Each
expectation is what kube-apiserver v1.32 answers, from its source (cited per command; paths in
github.com/kubernetes/kubernetes at v1.32, `staging/src/k8s.io/...` shortened to `k8s.io/...`), and what kubectl
prints for it. Where the emulator cannot do the real thing (exec, attach, logs: no container runs), it refuses as a
real API server does when it cannot reach the node's kubelet, and the test says so.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from heterojob.sim.cluster.harness import Emulator
from heterojob.sim.cluster.kubelet import Kubelet
from tests.harness.test_kubectl_conformance import _kubectls, _minor

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]
NS = "sre"


def _job(name: str, priority: str = "high", labels: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {"team": "ml"}},
            "spec": {"priority": priority, "replicas": {"min": 1},
                     "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                     "template": {"spec": {"containers": [{"name": "main", "image": "example/train:1"}]}}}}


def _pod(name: str, node: str | None, labels: dict[str, str], selector: dict[str, str] | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "example/train:1"}]}
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": spec}


FILES = {
    "ns.yaml": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    "train.yaml": _job("train"),
    "both.yaml": {"apiVersion": "v1", "kind": "List", "items": [_job("train"), _job("eval", "low")]},
    "caps.yaml": _job("Train"),
    "long.yaml": _job("j" * 254),
    "fleet.yaml": {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {"region": "cn-east"}},
         "spec": {}},
        _pod("worker-0", "gpu-node-1", {"app": "trainer"}),
        _pod("lonely", None, {"app": "probe"}, {"region": "cn-west"}),  # no node there: the scheduler leaves it
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}},
                               "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}]},
    "worker.yaml": _pod("worker-0", "gpu-node-1", {"app": "trainer"}),
    "pdb.yaml": {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                 "metadata": {"name": "trainer-pdb", "namespace": NS},
                 "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}}},
    "events.yaml": {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "train.1", "namespace": NS},
         "involvedObject": {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob", "name": "train",
                            "namespace": NS},
         "reason": "Admitted", "message": "placed", "type": "Normal", "source": {"component": "heterojob"}},
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "worker-0.1", "namespace": NS},
         "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "worker-0", "namespace": NS},
         "reason": "Pulled", "message": "pulled", "type": "Normal", "reportingComponent": "kubelet",
         "reportingInstance": "gpu-node-1"}]},
    "eviction.json": {"apiVersion": "policy/v1", "kind": "Eviction",
                      "metadata": {"name": "worker-0", "namespace": NS}},
}
EDITOR = "#!/bin/sh\nsed -i 's/backoffLimit: .*/backoffLimit: 7/' \"$1\"\n"
READY = '{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}'
RAW_LIST = f"/apis/heterojob.io/v1alpha1/namespaces/{NS}/heterojobs"


@dataclass
class Step:
    name: str
    args: list[str]
    code: int
    must: list[str] = field(default_factory=list)
    must_not: list[str] = field(default_factory=list)
    min_minor: int = 0  # kubectl flags/commands newer than some supported clients
    env: dict[str, str] = field(default_factory=dict)
    save: str | None = None  # write stdout to this file in the work directory
    timeout: float = 30


def n(*args: str) -> list[str]:
    return [*args, "-n", NS]


STEPS: list[Step] = [
    Step("setup", ["apply", "-f", "ns.yaml", *[a for p in sorted((ROOT / "crds").glob("*.heterojob.io.yaml"))
                                               for a in ("-f", str(p))]], 0, [r"namespace/sre created"]),
    Step("apply two jobs", ["apply", "-f", "both.yaml"], 0, [r"heterojob.heterojob.io/train created",
                                                             r"heterojob.heterojob.io/eval created"]),
    Step("fleet", ["apply", "-f", "fleet.yaml"], 0, [r"node/gpu-node-1 created", r"deployment.apps/web created"]),
    # the resource quota controller (pkg/controller/resourcequota, v1.32) fills status.hard and status.used for
    # what spec.hard names, counting what the namespace already holds; describe prints them
    Step("quota", n("create", "quota", "jobs", "--hard=pods=10,count/heterojobs.heterojob.io=5,requests.cpu=1k"), 0,
         [r"resourcequota/jobs created"]),
    Step("quota used", n("get", "quota", "jobs", "-o", "jsonpath={.status.used}"), 0,
         [r'"count/heterojobs.heterojob.io": ?"2"', r'"pods": ?"2"', r'"requests.cpu": ?"0"']),
    Step("describe quota", n("describe", "quota", "jobs"), 0,
         [r"^count/heterojobs.heterojob.io\s+2\s+5$", r"^pods\s+2\s+10$", r"^requests.cpu\s+0\s+1k$"]),
    Step("drop quota", n("delete", "quota", "jobs"), 0, [r"deleted"]),
    # errors.NewAlreadyExists (k8s.io/apimachinery/pkg/api/errors/errors.go): `<resource>.<group> "<name>" already
    # exists`, the qualified resource (schema.GroupResource.String())
    Step("create twice", ["create", "-f", "train.yaml"], 1,
         [r'Error from server \(AlreadyExists\).*heterojobs\.heterojob\.io "train" already exists']),
    Step("get -o name", n("get", "hj", "-o", "name"), 0,
         [r"^heterojob.heterojob.io/eval\nheterojob.heterojob.io/train$"]),
    Step("--sort-by", n("get", "hj", "--sort-by=.spec.priority", "-o", "custom-columns=N:.metadata.name"), 0,
         [r"N\ntrain\neval"]),
    # CRs convert only metadata.name and metadata.namespace field labels (apiextensions-apiserver
    # pkg/registry/customresource, no selectableFields in heterojob's CRDs); others: 400 "field label not supported"
    Step("--field-selector name", n("get", "hj", "--field-selector", "metadata.name=train", "-o", "name"), 0,
         [r"^heterojob.heterojob.io/train$"]),
    Step("--field-selector unsupported", n("get", "hj", "--field-selector", "spec.priority=high"), 1,
         [r"BadRequest.*field label not supported: spec.priority"]),
    # pods convert spec.nodeName (pkg/apis/core/v1/conversion.go): what drain lists
    Step("pods by node", ["get", "pods", "-A", "--field-selector", "spec.nodeName=gpu-node-1", "-o", "name"], 0,
         [r"^pod/worker-0$"]),
    # an Event's `source` field label is source.component, else reportingController; `reportingComponent` is
    # reportingController (pkg/registry/core/event/strategy.go ToSelectableFields)
    Step("events", ["apply", "-f", "events.yaml"], 0, [r"event/train.1 created", r"event/worker-0.1 created"]),
    *[Step(f"events by {sel}", n("get", "events", "--field-selector", sel, "-o", "name"), 0, [rf"^{want}$"])
      for sel, want in (("source=heterojob", "event/train.1"), ("source=kubelet", "event/worker-0.1"),
                        ("reportingComponent=kubelet", "event/worker-0.1"),
                        ("involvedObject.kind=HeteroJob,type=Normal", "event/train.1"))],
    # /version: what a v1.32.0 kube-apiserver answers (k8s.io/component-base/version); kmock's own says v1.26.4+k3s1
    Step("server version", ["get", "--raw", "/version"], 0, [r'"gitVersion": ?"v1\.32\.0"', r'"minor": ?"32"']),
    # the system namespaces a v1.32 server creates and keeps (pkg/controlplane/controller/systemnamespaces), so
    # `kubectl run` without -n lands in default; NamespaceLifecycle admission refuses to delete default,
    # kube-system and kube-public (k8s.io/apiserver pkg/admission/plugin/namespace/lifecycle/admission.go)
    Step("system namespaces", ["get", "namespaces", "default", "kube-node-lease", "kube-public", "kube-system",
                               "-o", "name"], 0,
         [r"^namespace/default\nnamespace/kube-node-lease\nnamespace/kube-public\nnamespace/kube-system$"]),
    Step("run in default", ["run", "probe", "--image=busybox:1.36", "--restart=Never"], 0, [r"^pod/probe created$"]),
    Step("delete default", ["delete", "namespace", "default"], 1,
         [r'Error from server \(Forbidden\): namespaces "default" is forbidden: this namespace may not be deleted']),
    # label selectors as k8s.io/apimachinery pkg/labels/selector.go parses them: set-based terms, `>`/`<` on integer
    # values, and its syntax errors in its words (400, kubectl prints them)
    Step("label node", ["label", "node", "gpu-node-1", "gpus=8"], 0, [r"node/gpu-node-1 labeled"]),
    Step("-l gt", ["get", "nodes", "-l", "gpus>4,region in (cn-east,cn-north)", "-o", "name"], 0,
         [r"^node/gpu-node-1$"]),
    Step("-l lt", ["get", "nodes", "-l", "gpus<4", "-o", "name"], 0, [], [r"node/"]),
    Step("-l notin, !key", n("get", "hj", "-l", "team notin (infra),!tier", "-o", "name"), 0,
         [r"^heterojob.heterojob.io/eval\nheterojob.heterojob.io/train$"]),
    Step("-l in without parentheses", n("get", "hj", "-l", "team in ml"), 1,
         [r"BadRequest.*unable to parse requirement: found 'ml' expected: '\('"]),
    Step("-l !key=value", n("get", "hj", "-l", "!team=ml"), 1,
         [r"BadRequest.*found '=', expected: ',' or 'end of string'"]),
    Step("-l gt not an integer", ["get", "nodes", "-l", "gpus>many"], 1,
         [r"""unable to parse requirement: values\[0\]: Invalid value: "many": for 'Gt', 'Lt' operators, the value """
          r"must be an integer"]),
    Step("custom-columns on status", n("get", "hj", "train", "-o",
                                       "custom-columns=NAME:.metadata.name,PHASE:.status.phase"), 0,
         [r"NAME\s+PHASE\ntrain\s+<none>"]),
    Step("get all", n("get", "all"), 0, [r"pod/worker-0\s", r"deployment.apps/web\s+0/1"]),
    Step("get --raw group version", ["get", "--raw", "/apis/heterojob.io/v1alpha1"], 0,
         [r'"groupVersion": ?"heterojob.io/v1alpha1"', r'"name": ?"heterojobs/status"']),
    Step("api-versions", ["api-versions"], 0, [r"^heterojob.io/v1alpha1$", r"^policy/v1$"]),
    # AlwaysAllow authorization (k8s.io/apiserver pkg/authorization/authorizerfactory): the emulator has no RBAC
    Step("auth can-i", n("auth", "can-i", "delete", "heterojobs"), 0, [r"^yes$"]),
    Step("auth can-i --list", n("auth", "can-i", "--list"), 0, [r"\*\.\*\s+\[\]\s+\[\]\s+\[\*\]"]),
    Step("auth whoami", ["auth", "whoami"], 0, [r"Username\s+emulator"], min_minor=28),
    # list chunking (k8s.io/apiserver pkg/storage/etcd3/store.go): limit/continue, remainingItemCount
    Step("--chunk-size=1", n("get", "hj", "--chunk-size=1", "-o", "name"), 0,
         [r"^heterojob.heterojob.io/eval\nheterojob.heterojob.io/train$"]),
    Step("limit", ["get", "--raw", f"{RAW_LIST}?limit=1"], 0, [r'"continue": ?"\w+', r'"remainingItemCount": ?1']),
    Step("bad continue", ["get", "--raw", f"{RAW_LIST}?limit=1&continue=bm90LWEtdG9rZW4"], 1,
         [r"BadRequest.*continue key is not valid"]),
    Step("patch json", n("patch", "hj", "train", "--type=json", "-p",
                         '[{"op":"replace","path":"/spec/backoffLimit","value":4}]'), 0,
         [r"heterojob.heterojob.io/train patched"]),
    # handlers/patch.go applyJSPatch: a patch that does not apply -> NewGenericServerResponse(422), whose message
    # is "the server rejected our request due to an error in our request" (apimachinery errors.go)
    Step("patch json failing test", n("patch", "hj", "train", "--type=json", "-p",
                                      '[{"op":"test","path":"/spec/priority","value":"low"}]'), 1,
         [r"^The request is invalid(: the server rejected our request due to an error in our request)?$"]),
    # apiextensions-apiserver customresource_handler.go supportedTypes: no strategic merge patch for CRs -> 415
    # (negotiation.NewUnsupportedMediaTypeError); kubectl's default --type is strategic
    *[Step(f"patch {how} on a CR", n("patch", "hj", "train", *extra, "-p", '{"spec":{"backoffLimit":5}}'), 1,
           [r"the body of the request was in an unknown format - accepted media types include: "
            r"application/json-patch\+json, application/merge-patch\+json, application/apply-patch\+yaml"])
      for how, extra in (("--type=strategic", ["--type=strategic"]), ("default type", []))],
    Step("edit", n("edit", "hj", "train"), 0, [r"heterojob.heterojob.io/train edited"],
         env={"KUBE_EDITOR": "./editor.sh", "EDITOR": "./editor.sh"}),
    Step("edited", n("get", "hj", "train", "-o", "jsonpath={.spec.backoffLimit}"), 0, [r"^7$"]),
    Step("save for replace", n("get", "hj", "train", "-o", "yaml"), 0, [r"resourceVersion"], save="current.yaml"),
    Step("replace", ["replace", "-f", "current.yaml"], 0, [r"heterojob.heterojob.io/train replaced"]),
    # a stale resourceVersion: 409 errors.NewConflict, qualified resource
    Step("replace stale", ["replace", "-f", "current.yaml"], 1,
         [r'Error from server \(Conflict\).*Operation cannot be fulfilled on heterojobs\.heterojob\.io "train": '
          r"the object has been modified; please apply your changes to the latest version and try again"]),
    Step("replace without resourceVersion", ["replace", "-f", "train.yaml"], 0,
         [r"heterojob.heterojob.io/train replaced"]),
    Step("label conflict", n("label", "hj", "train", "team=infra"), 1, [r"'team' already has a value \(ml\)"]),
    Step("label --overwrite", n("label", "hj", "train", "team=infra", "--overwrite"), 0, [r"train labeled"]),
    # ValidateObjectMeta (k8s.io/apimachinery/pkg/api/validation/objectmeta.go): 422 with the field
    Step("annotate bad key", n("annotate", "hj", "train", "bad key!=x"), 1,
         [r'The HeteroJob "train" is invalid: metadata.annotations: Invalid value: "bad key!": name part must '
          r"consist of alphanumeric characters"]),
    Step("name with capitals", ["create", "-f", "caps.yaml"], 1,
         [r'metadata.name: Invalid value: "Train": a lowercase RFC 1123 subdomain must consist of']),
    Step("name too long", ["create", "-f", "long.yaml"], 1, [r"metadata.name: Invalid value: \"j+\": must be no "
                                                             r"more than 253 characters"]),
    Step("namespace with capitals", ["create", "namespace", "Team_A"], 1,
         [r'metadata.name: Invalid value: "Team_A": a lowercase RFC 1123 label must consist of']),
    Step("unknown kind", ["get", "heterojobz"], 1, [r'the server doesn.t have a resource type "heterojobz"']),
    # crdHandler serves /scale only when the CRD declares it; otherwise NotFound for the name
    Step("scale a CR without scale", n("scale", "hj", "train", "--replicas=3"), 1,
         [r'Error from server \(NotFound\): heterojobs.heterojob.io "train" not found']),
    Step("scale a deployment", n("scale", "deployment", "web", "--replicas=3"), 0, [r"deployment.apps/web scaled"]),
    Step("scaled", n("get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"), 0, [r"^3$"]),
    Step("scale precondition", n("scale", "deployment", "web", "--replicas=2", "--current-replicas=5"), 1,
         [r"Expected replicas to be 5, was 3"]),
    Step("wait condition times out", n("wait", "--for=condition=Ready", "hj/train", "--timeout=1s"), 1,
         [r"timed out waiting for the condition"]),
    Step("wait jsonpath", n("wait", "--for=jsonpath={.spec.priority}=high", "hj/train", "--timeout=5s"), 0,
         [r"condition met"], min_minor=23),
    # finalizers: delete sets deletionTimestamp, the object stays until the finalizers go
    Step("add finalizer", n("patch", "hj", "eval", "--type=merge", "-p",
                            '{"metadata":{"finalizers":["example.com/hold"]}}'), 0, [r"eval patched"]),
    Step("delete --wait=false", n("delete", "hj", "eval", "--wait=false"), 0,
         [r'heterojob.heterojob.io "eval" deleted']),
    Step("terminating", n("get", "hj", "eval", "-o", "jsonpath={.metadata.deletionTimestamp}"), 0, [r"^\d{4}-"]),
    Step("release finalizer", n("patch", "hj", "eval", "--type=json", "-p",
                                '[{"op":"remove","path":"/metadata/finalizers"}]'), 0, [r"eval patched"]),
    # (kubectl 1.20 answers "no matching resources found" for an object already gone: a client difference)
    Step("wait --for=delete", n("wait", "--for=delete", "hj/eval", "--timeout=10s"), 0, [], min_minor=23),
    Step("gone", n("get", "hj", "eval"), 1, [r'heterojobs.heterojob.io "eval" not found']),
    Step("delete --dry-run=server", n("delete", "hj", "train", "--dry-run=server"), 0,
         [r'"train" deleted \(server dry run\)']),
    Step("still there", n("get", "hj", "train", "-o", "name"), 0, [r"^heterojob.heterojob.io/train$"]),
    Step("watch events", n("get", "hj", "-w", "--output-watch-events"), 124, [r"EVENT\s+NAME", r"ADDED\s+train"],
         timeout=4),
    Step("apply eval again", ["apply", "-f", "both.yaml"], 0, [r"eval created"]),
    Step("apply --prune", ["apply", "-f", "train.yaml", "--prune", "-l", "team=ml",
                           "--prune-allowlist=heterojob.io/v1alpha1/HeteroJob"], 0,
         [r"heterojob.heterojob.io/eval pruned"], min_minor=26),
    Step("taint", ["taint", "node", "gpu-node-1", "dedicated=gpu:NoSchedule"], 0, [r"node/gpu-node-1 tainted"]),
    Step("describe node", ["describe", "node", "gpu-node-1"], 0, [r"Taints:\s+dedicated=gpu:NoSchedule",
                                                                  r"Unschedulable:\s+false"]),
    # nodes' field set prints spec.unschedulable as a Go bool (pkg/registry/core/node/strategy.go NodeToSelectableFields)
    Step("schedulable nodes", ["get", "nodes", "--field-selector", "spec.unschedulable=false", "-o", "name"], 0,
         [r"^node/gpu-node-1$"]),
    Step("namespace phase", ["get", "namespace", NS, "-o", "jsonpath={.status.phase}"], 0, [r"^Active$"]),
    Step("server-side apply a scheduled pod", ["apply", "--server-side", "-f", "worker.yaml"], 0,
         [r"pod/worker-0 serverside-applied"], min_minor=22),
    Step("cordon", ["cordon", "gpu-node-1"], 0, [r"cordoned"]),
    Step("uncordon", ["uncordon", "gpu-node-1"], 0, [r"node/gpu-node-1 uncordoned"]),
    # exec/attach/logs: pkg/registry/core/pod/strategy.go streamLocation/LogLocation, then the kubelet dial
    Step("exec unscheduled", ["exec", "-n", NS, "lonely", "--", "true"], 1,
         [r"Error from server \(BadRequest\): pod lonely does not have a host assigned"]),
    Step("exec: no kubelet", ["exec", "-n", NS, "worker-0", "--", "true"], 1, [r"error dialing backend"]),
    Step("logs unscheduled", n("logs", "lonely"), 0, [], [r"."]),
    Step("logs bad container", n("logs", "worker-0", "-c", "nope"), 1, [r"container nope is not valid for pod worker-0"]),
    Step("logs: no kubelet", n("logs", "worker-0"), 1, [r"error dialing backend"]),
    # drain: the Eviction API (pkg/registry/core/pod/storage/eviction.go) with a budget that allows no disruption
    Step("pdb", ["apply", "-f", "pdb.yaml"], 0, [r"poddisruptionbudget.policy/trainer-pdb created"]),
    Step("pod ready", n("patch", "pod", "worker-0", "--subresource=status", "--type=merge", "-p", READY), 0,
         [r"pod/worker-0 patched"], min_minor=24),
    Step("get pdb", n("get", "pdb"), 0, [r"NAME\s+MIN AVAILABLE\s+MAX UNAVAILABLE\s+ALLOWED DISRUPTIONS\s+AGE",
                                         r"trainer-pdb\s+1\s+N/A\s+0\s"], min_minor=24),
    Step("eviction refused", ["create", "--raw", f"/api/v1/namespaces/{NS}/pods/worker-0/eviction", "-f",
                              "eviction.json"], 1,
         [r"Error from server \(TooManyRequests\): Cannot evict pod as it would violate the pod's disruption "
          r"budget\."], min_minor=24),
    Step("drain blocked", ["drain", "gpu-node-1", "--force", "--timeout=3s"], 1,
         [r"node/gpu-node-1 cordoned", r"Cannot evict pod as it would violate the pod's disruption budget"],
         min_minor=24),
    Step("drop pdb", n("delete", "pdb", "trainer-pdb"), 0, [r"deleted"]),
    Step("drain", ["drain", "gpu-node-1", "--force", "--timeout=10s"], 0, [r"pod/worker-0 evicted",
                                                                           r"node/gpu-node-1 (drained|evicted)"]),
    Step("healthz", ["get", "--raw", "/healthz"], 0, [r"^ok$"]),
    Step("readyz", ["get", "--raw", "/readyz"], 0, [r"^ok$"]),
    # nothing serves metrics here: the notfoundhandler's answer (k8s.io/apiserver pkg/util/notfoundhandler)
    Step("no /metrics", ["get", "--raw", "/metrics"], 1,
         [r"Error from server \(NotFound\): the server could not find the requested resource"]),
    # typed `kubectl create` commands post protobuf (runtime.Unknown around the kind's generated message)
    Step("create role", n("create", "role", "hj-reader", "--verb=get,list,watch", "--resource=heterojobs.heterojob.io"),
         0, [r"role.rbac.authorization.k8s.io/hj-reader created"]),
    Step("role rules", n("get", "role", "hj-reader", "-o", "jsonpath={.rules[0].apiGroups[0]}/{.rules[0].resources[0]}"
                         ":{.rules[0].verbs}"), 0, [r'^heterojob.io/heterojobs:\["get","list","watch"\]$']),
    Step("create rolebinding", n("create", "rolebinding", "hj-readers", "--role=hj-reader", "--group=sre"), 0,
         [r"rolebinding.rbac.authorization.k8s.io/hj-readers created"]),
    Step("create clusterrolebinding", ["create", "clusterrolebinding", "ops", "--clusterrole=view", "--user=ann"], 0,
         [r"clusterrolebinding.rbac.authorization.k8s.io/ops created"]),
    # (kubectl 1.20 creates policy/v1beta1, which a v1.32 server no longer serves: "no matches for kind")
    Step("create pdb", n("create", "pdb", "web-pdb", "--selector=app=web", "--min-available=50%"), 0,
         [r"poddisruptionbudget.policy/web-pdb created"], min_minor=22),
    Step("pdb min available", n("get", "pdb", "web-pdb", "-o", "jsonpath={.spec.minAvailable}"), 0, [r"^50%$"],
         min_minor=22),
    Step("create deployment", n("create", "deployment", "infer", "--image=example/infer:1", "--port=8080",
                                "--replicas=2"), 0, [r"deployment.apps/infer created"]),
    Step("deployment template", n("get", "deployment", "infer", "-o", "jsonpath={.spec.replicas} "
                                  "{.spec.template.spec.containers[0].image} {.spec.template.metadata.labels.app}"), 0,
         [r"^2 example/infer:1 infer$"]),
    Step("create job", ["create", "job", "-n", NS, "eval-once", "--image=example/eval:1", "--", "python", "-m", "eval"], 0,
         [r"job.batch/eval-once created"]),
    Step("job template", n("get", "job", "eval-once", "-o", "jsonpath={.spec.template.spec.restartPolicy} "
                           "{.spec.template.spec.containers[0].command}"), 0, [r'^Never \["python","-m","eval"\]$']),
    Step("create cronjob", n("create", "cronjob", "nightly", "--image=example/eval:1", "--schedule=0 2 * * *"), 0,
         [r"cronjob.batch/nightly created"], min_minor=21),
    # TokenRequest (serviceaccounts/token, sim/cluster/auth.py): the token alone on stdout, as a v1.32 server
    # answers; an account that does not exist and a duration under 10 minutes are refused with its words
    Step("create token", n("create", "token", "default"), 0, [r"^emulator-sa\.[\w-]+\n?$"], min_minor=24),
    Step("create token of no account", n("create", "token", "nobody"), 1,
         [r'failed to create token: serviceaccounts "nobody" not found'], min_minor=24),
    Step("create token too short", n("create", "token", "default", "--duration=5m"), 1,
         [r"spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes"],
         min_minor=24),
    Step("create priorityclass", ["create", "priorityclass", "training-high", "--value=100000"], 0,
         [r"priorityclass.scheduling.k8s.io/training-high created"]),
    # strategic merge patch directives are applied, not stored ($setElementOrder from `kubectl set image`)
    Step("set image", n("set", "image", "deployment/web", "web=nginx:1.28"), 0, [r"deployment.apps/web image updated"],
         [r"[Ww]arning", r"setElementOrder"]),
    Step("image set", n("get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[*].image}"), 0,
         [r"^nginx:1.28$"]),
    Step("unknown group", ["get", "--raw", "/apis/nosuch.example.com"], 1,
         [r"Error from server \(NotFound\): the server could not find the requested resource"]),
    Step("delete --all", n("delete", "hj", "--all"), 0, [r'heterojob.heterojob.io "train" deleted']),
    Step("none left", n("get", "hj"), 0, [r"No resources found in sre namespace"]),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Emulator, Path]]:
    work = tmp_path_factory.mktemp("kubectl-sre")
    for name, obj in FILES.items():
        (work / name).write_text(yaml.safe_dump(obj))
    editor = work / "editor.sh"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    with Emulator(workdir=work) as emulator:
        yield emulator, work


def _run(kubectl: str, emulator: Emulator, work: Path, step: Step) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(emulator.kubeconfig), "HOME": str(work / f"home-{Path(kubectl).stem}"),
           **step.env}
    try:
        return subprocess.run([kubectl, *step.args], cwd=work, env=env, capture_output=True, text=True,
                              timeout=step.timeout)
    except subprocess.TimeoutExpired as exc:  # `get -w` runs until stopped: what it printed so far
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return subprocess.CompletedProcess([kubectl, *step.args], 124, out, "")


@pytest.mark.parametrize("kubectl", _kubectls() or [pytest.param("", marks=pytest.mark.skip("no kubectl"))])
def test_sre_commands(cluster: tuple[Emulator, Path], kubectl: str) -> None:
    emulator, work = cluster
    emulator.reset()
    minor = _minor(kubectl)
    failures = []
    # a node's kubelet finishes the graceful deletion of its pods (drain and delete wait for that)
    kubelet = Kubelet(emulator.client(), start_delay=0.2, interval=0.2).start()
    try:
        for step in STEPS:
            if minor < step.min_minor:
                continue
            result = _run(kubectl, emulator, work, step)
            if step.save:
                (work / step.save).write_text(result.stdout)
            out = (result.stdout + result.stderr).strip()
            problems = [f"exit {result.returncode} != {step.code}"] if result.returncode != step.code else []
            problems += [f"no match for {m!r}" for m in step.must if not re.search(m, out, re.M)]
            problems += [f"unexpected {m!r}" for m in step.must_not if re.search(m, out, re.M)]
            if problems:
                failures.append(f"kubectl {' '.join(step.args)} [{step.name}]: {'; '.join(problems)}\n{out[:800]}")
    finally:
        kubelet.stop()
    assert not failures, f"{kubectl} (1.{minor}):\n" + "\n\n".join(failures)
