"""Server-side apply, field ownership, label selector validation and cascading deletion, run with the real `kubectl`
against the emulator (same runner as test_kubectl_sre.py: the kubectl on PATH and those in $HETEROJOB_KUBECTLS).

Each expectation is what kube-apiserver v1.32 answers (paths in github.com/kubernetes/kubernetes at v1.32,
`staging/src/k8s.io/...` shortened to `k8s.io/...`):
- apply conflicts: k8s.io/apimachinery pkg/util/managedfields/internal/conflict.go (NewConflictError,
  getConflictMessage, printManager: an Update manager is named with its API version, an Apply manager alone), 409;
  kubectl's apply adds its "Please review the fields above" advice. `--force-conflicts` takes the field over.
- the manager of a write: `fieldManager` (kubectl sends kubectl, kubectl-patch, kubectl-client-side-apply, ...).
- label selectors: k8s.io/apimachinery pkg/labels/selector.go NewRequirement (validateLabelKey: IsQualifiedName on
  path `key`; validateLabelValue on `values[i][key]`), wrapped in "unable to parse requirement: "; kubectl prefixes
  "Unable to find ... that match label selector".
- ObjectMeta keys: k8s.io/apimachinery pkg/util/validation/validation.go IsQualifiedName (more than one '/': "a
  qualified name must consist of ... with an optional DNS subdomain prefix and '/'").
- empty ObjectMeta maps are not stored (typed ObjectMeta, omitempty; CRs through apiextensions-apiserver
  pkg/apiserver/schema/objectmeta Coerce), so `kubectl diff` of a server-side-applied object shows nothing.
- managedFields a write sends: k8s.io/apimachinery pkg/util/managedfields/internal/fieldmanager.go decodeLiveOrNew and
  isResetManagedFields (a valid list owning fields replaces the stored one, `[]` or `[{}]` resets it, the write's
  own update recorded on top); kubectl >= 1.26 sends such a JSON patch when `apply --server-side` follows a
  client-side `apply` (k8s.io/client-go util/csaupgrade UpgradeManagedFields: `kubectl-client-side-apply` fields
  move to `kubectl`/Apply, the last-applied annotation to `kubectl-last-applied`).
- `--cascade=orphan`: pkg/controller/garbagecollector orphanDependents removes the owner's reference from each
  dependent, which stays. The DELETE adds the `orphan` finalizer beside the object's own (k8s.io/apiserver
  pkg/registry/generic/registry/store.go deletionFinalizersForGarbageCollection), and the garbage collector removes
  it once the dependents are orphaned; so an owner kept by another finalizer (kopf's) orphans them all the same,
  and `foregroundDeletion` goes once the dependents are, leaving the other finalizer to keep the owner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
import yaml

from heterojob.sim.cluster.harness import Emulator
from tests.harness.test_kubectl_conformance import _kubectls, _minor
from tests.harness.test_kubectl_sre import Step, _run

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]
NS = "own"
CRDS = [a for p in sorted((ROOT / "crds").glob("*.heterojob.io.yaml")) for a in ("-f", str(p))]


def _job(priority: str = "high", workload: str | None = "llama3-8b") -> dict:
    spec: dict = {"priority": priority, "replicas": {"min": 1},
                  "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                  "template": {"spec": {"containers": [{"name": "main", "image": "example/train:1"}]}}}
    if workload:
        spec["workload"] = workload
    return {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
            "metadata": {"name": "train", "namespace": NS, "labels": {"team": "ml"}}, "spec": spec}


EVENT = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "train.1", "namespace": NS},
         "involvedObject": {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob", "name": "train",
                            "namespace": NS},
         "reason": "Admitted", "message": "placed", "type": "Normal", "source": {"component": "heterojob"}}
FILES = {"ns.yaml": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
         "job.yaml": _job(), "job-low.yaml": _job("low"), "job-no-workload.yaml": _job(workload=None),
         "event.yaml": EVENT,
         "job-kopf.yaml": {**_job(), "metadata": {**_job()["metadata"],
                                                  "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}}}
CONFLICT_ADVICE = r"Please review the fields above--they currently have other managers"


def n(*args: str) -> list[str]:
    return [*args, "-n", NS]


MANAGERS = n("get", "hj", "train", "--show-managed-fields", "-o",
             'jsonpath={range .metadata.managedFields[*]}{.manager}:{.operation} {end}')
STEPS: list[Step] = [
    Step("setup", ["apply", "-f", "ns.yaml", *CRDS], 0, [r"namespace/own created"]),
    Step("first apply", ["apply", "--server-side", "-f", "job.yaml"], 0,
         [r"heterojob.heterojob.io/train serverside-applied"]),
    # the applier owns what it applied, not what the server defaulted (backoffLimit)
    Step("owned by kubectl", MANAGERS, 0, [r"^kubectl:Apply$"]),
    Step("owned fields", n("get", "hj", "train", "--show-managed-fields", "-o",
                           "jsonpath={.metadata.managedFields[0].fieldsV1.f:spec}"), 0,
         [r'"f:priority":\{\}', r'"f:workload":\{\}'], [r"backoffLimit"]),
    Step("diff after apply", ["diff", "-f", "job.yaml"], 0, [], [r"."]),
    Step("re-apply", ["apply", "--server-side", "-f", "job.yaml"], 0, [r"train serverside-applied"]),
    Step("another manager conflicts", ["apply", "--server-side", "--field-manager=ops", "-f", "job-low.yaml"], 1,
         [r'^error: Apply failed with 1 conflict: conflict with "kubectl": \.spec\.priority$', CONFLICT_ADVICE]),
    Step("unchanged", n("get", "hj", "train", "-o", "jsonpath={.spec.priority}"), 0, [r"^high$"]),
    # the status subresource (apiextensions-apiserver pkg/registry/customresource strategy.go/status_strategy.go):
    # /status keeps the spec, the main resource keeps the status
    Step("patch status", n("patch", "hj", "train", "--subresource=status", "--type=merge", "-p",
                           '{"spec":{"priority":"urgent"},"status":{"phase":"Running"}}'), 0, [r"train patched"],
         min_minor=24),
    Step("status on the main resource", n("patch", "hj", "train", "--type=merge", "-p",
                                          '{"status":{"phase":"Failed"}}'), 0, [r"patched \(no change\)"]),
    Step("spec and status kept", n("get", "hj", "train", "-o", "jsonpath={.spec.priority} {.status.phase}"), 0,
         [r"^high Running$"], min_minor=24),
    Step("get --subresource=status", n("get", "hj", "train", "--subresource=status", "-o", "yaml"), 0,
         [r"^  phase: Running$"], min_minor=24),
    # an Event's involvedObject field labels (pkg/registry/core/event/strategy.go ToSelectableFields)
    Step("event", ["apply", "-f", "event.yaml"], 0, [r"event/train.1 created"]),
    Step("events of the job", n("get", "events", "--field-selector",
                                "involvedObject.kind=HeteroJob,involvedObject.name=train", "-o", "name"), 0,
         [r"^event/train.1$"]),
    Step("events of another", n("get", "events", "--field-selector",
                                "involvedObject.kind=HeteroJob,involvedObject.name=eval"), 0,
         [r"No resources found in own namespace"]),
    # the same value is co-owned, no conflict
    Step("co-own", ["apply", "--server-side", "--field-manager=ops", "-f", "job.yaml"], 0,
         [r"serverside-applied"]),
    Step("two appliers", MANAGERS, 0, [r"^kubectl:Apply ops:Apply$"]),
    Step("--force-conflicts", ["apply", "--server-side", "--field-manager=ops", "--force-conflicts", "-f",
                               "job-low.yaml"], 0, [r"serverside-applied"]),
    Step("forced", n("get", "hj", "train", "-o", "jsonpath={.spec.priority}"), 0, [r"^low$"]),
    Step("the first applier lost it", ["apply", "--server-side", "-f", "job.yaml"], 1,
         [r'conflict with "ops": \.spec\.priority']),
    # an update takes the fields it changes: the conflict names it with its API version
    Step("patch", n("patch", "hj", "train", "--type=merge", "-p", '{"spec":{"priority":"medium"}}'), 0,
         [r"patched"]),
    Step("conflict with an updater", ["apply", "--server-side", "--field-manager=ops", "-f", "job-low.yaml"], 1,
         [r'conflict with "kubectl-patch" using heterojob\.io/v1alpha1: \.spec\.priority']),
    # a field its applier stops applying, and nobody else owns, is removed (ops still owns workload: kept)
    Step("drop workload, still co-owned", ["apply", "--server-side", "--force-conflicts", "-f",
                                           "job-no-workload.yaml"], 0, [r"serverside-applied"]),
    Step("kept", n("get", "hj", "train", "-o", "jsonpath={.spec.workload}"), 0, [r"^llama3-8b$"]),
    Step("ops drops it too", ["apply", "--server-side", "--field-manager=ops", "--force-conflicts", "-f",
                              "job-no-workload.yaml"], 0, [r"serverside-applied"]),
    Step("removed", n("get", "hj", "train", "-o", "jsonpath={.spec.workload}"), 0, [], [r"."]),
    # label selectors: keys and values are validated as label names and values (400)
    Step("-l bad key", n("get", "hj", "-l", "Bad_=x"), 1,
         [r'Error from server \(BadRequest\): .*unable to parse requirement: key: Invalid value: "Bad_": name part '
          r"must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
          r"character \(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
          r"'\(\[A-Za-z0-9\]\[-A-Za-z0-9_.\]\*\)\?\[A-Za-z0-9\]'\)$"]),
    Step("-l bad key, exists", n("get", "hj", "-l", "a/b/c"), 1,
         [r'unable to parse requirement: key: Invalid value: "a/b/c": a qualified name must consist of .* with an '
          r"optional DNS subdomain prefix and '/' \(e.g. 'example.com/MyName'\)$"]),
    Step("-l bad values", n("get", "hj", "-l", "team in (ml,_x,y-)"), 1,
         [r'unable to parse requirement: \[values\[0\]\[team\]: Invalid value: "_x": a valid label must be an empty '
          r'string or .*, values\[2\]\[team\]: Invalid value: "y-": a valid label must'],
         [r"values\[1\]"]),
    Step("-l good", n("get", "hj", "-l", "team=ml", "-o", "name"), 0, [r"^heterojob.heterojob.io/train$"]),
    Step("label with two slashes", n("label", "hj", "train", "a/b/c=x"), 1,
         [r'metadata.labels: Invalid value: "a/b/c": a qualified name must consist of alphanumeric characters']),
    # ValidateAnnotations: the key checked in lower case, named as given
    Step("annotate a bad key", n("annotate", "hj", "train", "Bad Key!=x"), 1,
         [r'metadata.annotations: Invalid value: "Bad Key!": name part must consist of']),
    Step("label with an empty prefix", n("label", "hj", "train", "/c=x"), 1,
         [r'metadata.labels: Invalid value: "/c": prefix part must be non-empty$']),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Emulator, Path]]:
    work = tmp_path_factory.mktemp("kubectl-ownership")
    for name, obj in FILES.items():
        (work / name).write_text(yaml.safe_dump(obj))
    with Emulator(workdir=work) as emulator:
        yield emulator, work


def _check(kubectl: str, emulator: Emulator, work: Path, step: Step) -> str | None:
    result = _run(kubectl, emulator, work, step)
    out = (result.stdout + result.stderr).strip()
    problems = [f"exit {result.returncode} != {step.code}"] if result.returncode != step.code else []
    problems += [f"no match for {m!r}" for m in step.must if not re.search(m, out, re.M)]
    problems += [f"unexpected {m!r}" for m in step.must_not if re.search(m, out, re.M)]
    return f"kubectl {' '.join(step.args)} [{step.name}]: {'; '.join(problems)}\n{out[:800]}" if problems else None


KUBECTLS = _kubectls() or [pytest.param("", marks=pytest.mark.skip("no kubectl"))]


@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_ownership_and_selectors(cluster: tuple[Emulator, Path], kubectl: str) -> None:
    emulator, work = cluster
    emulator.reset()
    minor = _minor(kubectl)
    if minor < 22:
        pytest.skip("server-side apply conflicts need kubectl >= 1.22")
    failures = [f for step in STEPS if minor >= step.min_minor and (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_delete_cascade_orphan_keeps_dependents_without_the_reference(cluster: tuple[Emulator, Path],
                                                                      kubectl: str) -> None:
    emulator, work = cluster
    emulator.reset()
    for step in STEPS[:2]:
        assert _check(kubectl, emulator, work, step) is None
    _owned_pod(kubectl, emulator, work, "train-kept", None)
    steps = [
        Step("orphan", n("delete", "hj", "train", "--cascade=orphan"), 0, [r'heterojob.heterojob.io "train" deleted']),
        Step("kept, no reference", n("get", "pod", "train-kept", "-o",
                                     "jsonpath={.metadata.name}:{.metadata.ownerReferences}"), 0, [r"^train-kept:$"]),
        Step("owner again", ["apply", "--server-side", "-f", "job.yaml"], 0, [r"serverside-applied"]),
    ]
    failures = [f for step in steps if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)
    _owned_pod(kubectl, emulator, work, "train-collected", None)
    steps = [
        Step("background", n("delete", "hj", "train"), 0, [r'"train" deleted']),
        Step("collected", n("get", "pod", "train-collected"), 1, [r'pods "train-collected" not found']),
        Step("the orphan stays", n("get", "pod", "train-kept", "-o", "name"), 0, [r"^pod/train-kept$"]),
    ]
    failures = [f for step in steps if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_server_side_apply_takes_over_a_client_side_apply(cluster: tuple[Emulator, Path], kubectl: str) -> None:
    """After `kubectl apply`, `kubectl apply --server-side` migrates the client-side ownership to its own Apply
    entry, so the edited file applies server-side without a conflict with "kubectl-client-side-apply"."""
    emulator, work = cluster
    emulator.reset()
    if _minor(kubectl) < 26:
        pytest.skip("kubectl migrates client-side apply ownership since 1.26")
    assert _check(kubectl, emulator, work, STEPS[0]) is None
    steps = [
        Step("client-side", ["apply", "-f", "job.yaml"], 0, [r"train created"]),
        Step("client-side owner", MANAGERS, 0, [r"^kubectl-client-side-apply:Update$"]),
        Step("server-side, migrated", ["apply", "--server-side", "-f", "job.yaml"], 0, [r"serverside-applied"]),
        Step("migrated owners", MANAGERS, 0, [r"^kubectl:Apply kubectl-last-applied:Apply$"]),
        Step("server-side, edited", ["apply", "--server-side", "-f", "job-low.yaml"], 0, [r"serverside-applied"],
             [r"conflict"]),
        Step("applied", n("get", "hj", "train", "-o", "jsonpath={.spec.priority}"), 0, [r"^low$"]),
        # "Clearing ManagedFields" (server-side apply docs): one empty entry resets ownership, the patch owns nothing
        Step("reset", n("patch", "hj", "train", "--type=json", "-p",
                        '[{"op":"replace","path":"/metadata/managedFields","value":[{}]}]'), 0, [r"patched"]),
        Step("no owners", MANAGERS, 0, [], [r"."]),
        Step("nobody to conflict with", ["apply", "--server-side", "--field-manager=ops", "-f", "job.yaml"], 0,
             [r"serverside-applied"]),
        Step("ops owns it all", MANAGERS, 0, [r"^ops:Apply$"]),
    ]
    failures = [f for step in steps if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)


KOPF_DONE = Step("kopf releases it", n("patch", "hj", "train", "--type=json", "-p",
                                      '[{"op":"remove","path":"/metadata/finalizers/0"}]'), 0, [r"patched"])


@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_cascade_holds_when_another_finalizer_keeps_the_owner(cluster: tuple[Emulator, Path], kubectl: str) -> None:
    """A HeteroJob with kopf's finalizer: `--cascade=orphan` still orphans its pod (the GC's `orphan` finalizer),
    `--cascade=foreground` deletes it; kopf's finalizer alone keeps the job until kopf removes it."""
    emulator, work = cluster
    emulator.reset()
    assert _check(kubectl, emulator, work, STEPS[0]) is None
    job = Step("job with kopf's finalizer", ["apply", "--server-side", "-f", "job-kopf.yaml"], 0, [r"applied"])
    assert _check(kubectl, emulator, work, job) is None
    _owned_pod(kubectl, emulator, work, "train-0", None)
    finalizers = n("get", "hj", "train", "-o", "jsonpath={.metadata.finalizers} {.metadata.deletionTimestamp}")
    steps = [
        Step("orphan", n("delete", "hj", "train", "--cascade=orphan", "--wait=false"), 0, [r'"train" deleted']),
        Step("kept by kopf alone", finalizers, 0, [r'^\["kopf.zalando.org/KopfFinalizerMarker"\] \d{4}-']),
        Step("orphaned at once", n("get", "pod", "train-0", "-o", "jsonpath={.metadata.ownerReferences}"), 0, [],
             [r"."]),
        KOPF_DONE,
        Step("job gone", n("get", "hj", "train"), 1, [r'"train" not found']),
        Step("the orphan stays", n("get", "pod", "train-0", "-o", "name"), 0, [r"^pod/train-0$"]),
    ]
    failures = [f for step in steps if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)
    assert _check(kubectl, emulator, work, job) is None
    _owned_pod(kubectl, emulator, work, "train-1", None)
    steps = [
        Step("foreground", n("delete", "hj", "train", "--cascade=foreground", "--wait=false"), 0,
             [r'"train" deleted']),
        Step("dependent deleted", n("get", "pod", "train-1"), 1, [r'pods "train-1" not found']),
        Step("foregroundDeletion gone, kopf's kept", finalizers, 0,
             [r'^\["kopf.zalando.org/KopfFinalizerMarker"\] \d{4}-']),
        KOPF_DONE,
        Step("job gone", n("get", "hj", "train"), 1, [r'"train" not found']),
    ]
    failures = [f for step in steps if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)


def _owned_pod(kubectl: str, emulator: Emulator, work: Path, name: str, node: str | None) -> None:
    uid = _run(kubectl, emulator, work, Step("uid", n("get", "hj", "train", "-o", "jsonpath={.metadata.uid}"), 0))
    ref = {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob", "name": "train", "uid": uid.stdout.strip(),
           "controller": True, "blockOwnerDeletion": True}  # as the operator's pods (kube/manifests.py)
    spec: dict = {"containers": [{"name": "main", "image": "example/train:1"}]}
    if node:
        spec["nodeName"] = node
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": NS, "ownerReferences": [ref]}, "spec": spec}
    (work / f"{name}.yaml").write_text(yaml.safe_dump(pod))
    assert _check(kubectl, emulator, work, Step("pod", ["apply", "-f", f"{name}.yaml"], 0, [r"created"])) is None


@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_delete_cascade_foreground_keeps_the_owner_until_its_dependents_are_gone(cluster: tuple[Emulator, Path],
                                                                                  kubectl: str) -> None:
    emulator, work = cluster
    emulator.reset()
    for step in STEPS[:2]:
        assert _check(kubectl, emulator, work, step) is None
    # a pod bound to a node is deleted gracefully: it stays Terminating (no kubelet here), so the owner waits
    _owned_pod(kubectl, emulator, work, "train-0", "gpu-node-1")
    steps = [
        Step("foreground", n("delete", "hj", "train", "--cascade=foreground", "--wait=false"), 0,
             [r'heterojob.heterojob.io "train" deleted']),
        Step("owner waits", n("get", "hj", "train", "-o",
                              "jsonpath={.metadata.finalizers} {.metadata.deletionTimestamp}"), 0,
             [r'^\["foregroundDeletion"\] \d{4}-']),
        Step("dependent terminating", n("get", "pod", "train-0", "-o", "jsonpath={.metadata.deletionTimestamp}"), 0,
             [r"^\d{4}-"]),
        Step("dependent gone", n("delete", "pod", "train-0", "--grace-period=0", "--force"), 0, [r"force deleted"]),
        Step("owner gone", n("get", "hj", "train"), 1, [r'heterojobs.heterojob.io "train" not found']),
    ]
    failures = [f for step in steps if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)
    # with no dependent left to wait for, a foreground deletion ends at once (kubectl waits for it)
    assert _check(kubectl, emulator, work, STEPS[1]) is None
    _owned_pod(kubectl, emulator, work, "train-1", None)
    steps = [
        Step("foreground, waiting", n("delete", "hj", "train", "--cascade=foreground", "--timeout=10s"), 0,
             [r'"train" deleted']),
        Step("both gone", n("get", "hj,pods", "-o", "name"), 0, [], [r"train"]),
    ]
    failures = [f for step in steps if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)


def test_patch_options_are_validated(cluster: tuple[Emulator, Path]) -> None:
    """ValidatePatchOptions (k8s.io/apimachinery pkg/apis/meta/v1/validation/validation.go), answered by
    handlers/patch.go as 422 Invalid on PatchOptions: kubectl always names a manager, a controller must."""
    emulator, _ = cluster
    emulator.reset()
    path = f"{emulator.url}/api/v1/namespaces/default/configmaps/cm"
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}})
    answer = urllib3.request("PATCH", path, body=body, headers={"Content-Type": "application/apply-patch+yaml"})
    assert answer.status == 422
    assert answer.json()["message"] == ('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                                        "is required for apply patch")
    answer = urllib3.request("PATCH", path + "?fieldManager=ops", body=body,
                             headers={"Content-Type": "application/apply-patch+yaml"})
    assert answer.status == 201, answer.data
    answer = urllib3.request("PATCH", path + "?force=true", body="{}",
                             headers={"Content-Type": "application/merge-patch+json"})
    assert answer.status == 422
    assert answer.json()["message"] == ('PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be '
                                        "specified for non-apply patch")
