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
- `--cascade=orphan`: pkg/controller/garbagecollector orphanDependents removes the owner's reference from each
  dependent, which stays.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
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


FILES = {"ns.yaml": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
         "job.yaml": _job(), "job-low.yaml": _job("low"), "job-no-workload.yaml": _job(workload=None)}
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
    if _minor(kubectl) < 22:
        pytest.skip("server-side apply conflicts need kubectl >= 1.22")
    failures = [f for step in STEPS if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_delete_cascade_orphan_keeps_dependents_without_the_reference(cluster: tuple[Emulator, Path],
                                                                      kubectl: str) -> None:
    emulator, work = cluster
    emulator.reset()
    for step in STEPS[:2]:
        assert _check(kubectl, emulator, work, step) is None
    uid = _run(kubectl, emulator, work, Step("uid", n("get", "hj", "train", "-o", "jsonpath={.metadata.uid}"), 0))
    ref = {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob", "name": "train", "uid": uid.stdout.strip()}
    for name in ("kept", "collected"):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"train-{name}", "namespace": NS, "ownerReferences": [ref]},
               "spec": {"containers": [{"name": "main", "image": "example/train:1"}]}}
        (work / f"pod-{name}.yaml").write_text(yaml.safe_dump(pod))
    steps = [
        Step("dependent", ["apply", "-f", "pod-kept.yaml"], 0, [r"pod/train-kept created"]),
        Step("orphan", n("delete", "hj", "train", "--cascade=orphan"), 0, [r'heterojob.heterojob.io "train" deleted']),
        Step("kept, no reference", n("get", "pod", "train-kept", "-o",
                                     "jsonpath={.metadata.name}:{.metadata.ownerReferences}"), 0, [r"^train-kept:$"]),
        Step("owner again", ["apply", "--server-side", "-f", "job.yaml"], 0, [r"serverside-applied"]),
    ]
    failures = [f for step in steps if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)
    uid = _run(kubectl, emulator, work, Step("uid", n("get", "hj", "train", "-o", "jsonpath={.metadata.uid}"), 0))
    pod = yaml.safe_load((work / "pod-collected.yaml").read_text())
    pod["metadata"]["ownerReferences"][0]["uid"] = uid.stdout.strip()
    (work / "pod-collected.yaml").write_text(yaml.safe_dump(pod))
    steps = [
        Step("dependent", ["apply", "-f", "pod-collected.yaml"], 0, [r"pod/train-collected created"]),
        Step("background", n("delete", "hj", "train"), 0, [r'"train" deleted']),
        Step("collected", n("get", "pod", "train-collected"), 1, [r'pods "train-collected" not found']),
        Step("the orphan stays", n("get", "pod", "train-kept", "-o", "name"), 0, [r"^pod/train-kept$"]),
    ]
    failures = [f for step in steps if (f := _check(kubectl, emulator, work, step))]
    assert not failures, "\n\n".join(failures)
