"""The commands an SRE types, run with the real `kubectl` binary against the API emulator.

Every `kubectl` given runs the whole list: the one on PATH (CI: Debian's kubernetes-client 1.20 when
scripts/install-deps installed it; the build machines: v1.32) and any listed in $HETEROJOB_KUBECTLS
(colon-separated paths, e.g. an unpacked Debian kubectl 1.20 next to a v1.32). The expected outputs are what
a real API server makes kubectl print (column headers of kube's printers and the CRD's printer columns,
field errors worded as kube-apiserver words them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from heterojob.sim.cluster.harness import Emulator

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]


def _kubectls() -> list[str]:
    found = [p for p in [shutil.which("kubectl"), *os.environ.get("HETEROJOB_KUBECTLS", "").split(":")] if p]
    return list(dict.fromkeys(found))


JOB = {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
       "metadata": {"name": "train", "namespace": "conf", "labels": {"team": "ml"}},
       "spec": {"priority": "high", "replicas": {"min": 2},
                "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                "template": {"spec": {"containers": [{"name": "main", "image": "example/train:1"}]}}}}
BAD_JOB = {**JOB, "metadata": {"name": "bad", "namespace": "conf"},
           "spec": {**JOB["spec"], "priority": "critical", "replicas": {"min": 0}}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "worker-0", "namespace": "conf"},
       "spec": {"containers": [{"name": "main", "image": "example/train:1",
                                "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
BAD_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad-pod", "namespace": "conf"},
           "spec": {"containers": [{"name": "Main_Container!", "image": "x"}]}}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-0", "labels": {"region": "cn-east"}},
        "spec": {}}
EVENT = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "train.1", "namespace": "conf"},
         "involvedObject": {"kind": "HeteroJob", "name": "train", "namespace": "conf"},
         "reason": "Admitted", "message": "placed on cn-east/nvidia-h100", "type": "Normal",
         "source": {"component": "heterojob"}, "count": 1}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Emulator, Path]]:
    work = tmp_path_factory.mktemp("kubectl")
    files = {"ns.yaml": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "conf"}},
             "job.yaml": JOB, "bad.yaml": BAD_JOB, "pod.yaml": POD, "bad-pod.yaml": BAD_POD, "node.yaml": NODE,
             "event.yaml": EVENT,
             "job-low.yaml": {**JOB, "spec": {**JOB["spec"], "priority": "low"}},
             "job-unknown.yaml": {**JOB, "spec": {**JOB["spec"], "colour": "blue"}},
             "pod-unknown.yaml": {**POD, "metadata": {"name": "typo", "namespace": "conf"},
                                  "spec": {**POD["spec"], "containerz": []}}}
    for name, obj in files.items():
        (work / name).write_text(yaml.safe_dump(obj))
    with Emulator(workdir=work) as emulator:
        yield emulator, work


def _run(kubectl: str, emulator: Emulator, work: Path, *args: str, timeout: float = 30
         ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(emulator.kubeconfig), "HOME": str(work / f"home-{Path(kubectl).stem}")}
    try:
        return subprocess.run([kubectl, *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # `get -w` runs until stopped: what it printed so far
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return subprocess.CompletedProcess([kubectl, *args], 124, out, "")


def _minor(kubectl: str) -> int:
    out = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True).stdout
    return int(re.search(r'"minor":\s*"(\d+)', out).group(1))  # type: ignore[union-attr]


# (name, args, expected exit code, regexes stdout+stderr must match, regexes they must not match)
COMMANDS: list[tuple[str, list[str], int, list[str], list[str]]] = [
    ("version", ["version"], 0, [r"Server Version"], []),
    ("apply namespace", ["apply", "-f", "ns.yaml"], 0, [r"namespace/conf created"], []),
    *[(f"apply crd {p.name}", ["apply", "-f", str(p)], 0, [r"customresourcedefinition.* created"], [])
      for p in sorted((ROOT / "crds").glob("*.heterojob.io.yaml"))],
    ("api-resources", ["api-resources", "--api-group=heterojob.io"], 0, [r"heterojobs\s+hj\s"], [r"[Ww]arning"]),
    ("apply job", ["apply", "-f", "job.yaml"], 0, [r"heterojob.heterojob.io/train created"], []),
    ("apply again", ["apply", "-f", "job.yaml"], 0, [r"heterojob.heterojob.io/train unchanged"], []),
    ("get hj printer columns", ["get", "hj", "-n", "conf"], 0,
     [r"NAME\s+PHASE\s+CLASS\s+REGION\s+REPLICAS\s+UTIL\s+AGE", r"\ntrain\s"], [r"[Ww]arning", "MESSAGE"]),
    ("get -A -o wide", ["get", "heterojobs", "-A", "-o", "wide"], 0, [r"NAMESPACE\s+NAME\s+PHASE.*MESSAGE",
                                                                     r"conf\s+train"], []),
    ("get -o json has defaults", ["get", "heterojobs.heterojob.io", "train", "-n", "conf", "-o", "json"], 0,
     [r'"backoffLimit": 3', r'"priority": "high"'], []),
    ("get -o yaml", ["get", "hj/train", "-n", "conf", "-o", "yaml"], 0, [r"kind: HeteroJob", r"uid: "], []),
    ("--show-labels", ["get", "hj", "-n", "conf", "--show-labels"], 0, [r"LABELS", r"team=ml"], []),
    ("label selector match", ["get", "hj", "-n", "conf", "-l", "team=ml"], 0, [r"\ntrain\s"], []),
    ("label selector miss", ["get", "hj", "-n", "conf", "-l", "team!=ml"], 0, [r"No resources found"], []),
    ("custom-columns", ["get", "hj", "-n", "conf", "-o", "custom-columns=JOB:.metadata.name,PRIO:.spec.priority"],
     0, [r"JOB\s+PRIO", r"train\s+high"], []),
    ("jsonpath", ["get", "hj", "-n", "conf", "-o", "jsonpath={.items[0].spec.replicas.min}"], 0, [r"^2$"], []),
    ("explain spec", ["explain", "heterojob.spec"], 0, [r"devices", r"priority"], []),
    ("explain field", ["explain", "hj.spec.priority"], 0, [r"priority\s+<string>|FIELD:\s+priority"], []),
    ("describe", ["describe", "hj", "train", "-n", "conf"], 0, [r"Name:\s+train", r"Priority:\s+high"], []),
    ("annotate", ["annotate", "hj", "train", "-n", "conf", "heterojob.io/migrate=manual"], 0,
     [r"heterojob.heterojob.io/train annotated"], []),
    ("label", ["label", "hj", "train", "-n", "conf", "tier=gold"], 0, [r"heterojob.heterojob.io/train labeled"], []),
    ("patch merge", ["patch", "hj", "train", "-n", "conf", "--type=merge", "-p", '{"spec":{"backoffLimit":5}}'],
     0, [r"heterojob.heterojob.io/train patched"], []),
    ("patch refused", ["patch", "hj", "train", "-n", "conf", "--type=merge", "-p", '{"spec":{"priority":"critical"}}'],
     1, [r'spec.priority: Unsupported value: "critical": supported values: "urgent", "high", "medium", "low"'], []),
    ("apply refused", ["apply", "-f", "bad.yaml"], 1,
     [r'spec.priority: Unsupported value: "critical"',
      r"spec.replicas.min: Invalid value: 0: spec.replicas.min in body should be greater than or equal to 1"], []),
    ("unknown field refused", ["apply", "-f", "job-unknown.yaml"], 1, [r"colour"], []),
    ("server dry-run", ["apply", "-f", "job-low.yaml", "--dry-run=server"], 0, [r"configured \(server dry run\)"], []),
    ("dry-run changed nothing", ["get", "hj", "train", "-n", "conf", "-o", "jsonpath={.spec.priority}"], 0,
     [r"^high$"], []),
    ("diff", ["diff", "-f", "job-low.yaml"], 1, [r"-\s+priority: high", r"\+\s+priority: low"], []),
    ("server-side apply", ["apply", "--server-side", "--force-conflicts", "-f", "job-low.yaml"], 0,
     [r"heterojob.heterojob.io/train serverside-applied"], []),
    ("bad pod refused", ["apply", "-f", "bad-pod.yaml"], 1,
     [r'spec.containers\[0\].name: Invalid value: "Main_Container!": a lowercase RFC 1123 label'], []),
    ("unknown pod field refused", ["apply", "-f", "pod-unknown.yaml"], 1, [r'unknown field \\?"(spec\.)?containerz'], []),
    ("explain a built-in", ["explain", "pod.spec.restartPolicy"], 0, [r"restartPolicy\s+<string>", r"Always"], []),
    ("apply pod, node, event", ["apply", "-f", "pod.yaml", "-f", "node.yaml", "-f", "event.yaml"], 0,
     [r"pod/worker-0 created", r"node/gpu-node-0 created", r"event/train.1 created"], []),
    ("create namespace", ["create", "namespace", "extra"], 0, [r"namespace/extra created"], []),
    ("create configmap", ["create", "configmap", "settings", "-n", "extra", "--from-literal=mode=fast"], 0,
     [r"configmap/settings created"], []),
    ("create quota", ["create", "quota", "gpus", "-n", "extra", "--hard=requests.nvidia.com/gpu=8"], 0,
     [r"resourcequota/gpus created"], []),
    ("run", ["run", "probe", "-n", "extra", "--image=busybox:1.36", "--restart=Never"], 0, [r"pod/probe created"], []),
    ("cordon", ["cordon", "gpu-node-0"], 0, [r"node/gpu-node-0 cordoned"], []),
    ("get pods -A", ["get", "pods", "-A"], 0, [r"NAMESPACE\s+NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE",
                                               r"conf\s+worker-0\s+0/1\s+Pending", r"extra\s+probe\s"], []),
    ("get pods -o wide", ["get", "pods", "-n", "conf", "-o", "wide"], 0, [r"IP\s+NODE"], []),
    ("get nodes", ["get", "nodes", "-L", "region"], 0, [r"NAME\s+STATUS\s+ROLES\s+AGE\s+VERSION\s+REGION",
                                                        r"gpu-node-0\s+\S+,SchedulingDisabled\s+<none>.*cn-east"], []),
    ("get events -A", ["get", "events", "-A"], 0, [r"LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+MESSAGE",
                                                   r"Admitted\s+heterojob/train\s+placed on"], []),
    ("events.k8s.io", ["get", "events.v1.events.k8s.io", "-n", "conf", "-o", "jsonpath={.items[0].note}"], 0,
     [r"placed on cn-east/nvidia-h100"], []),
    ("watch", ["get", "hj", "-n", "conf", "-w"], 124, [r"NAME\s+PHASE", r"\ntrain\s"], []),
    # an unscheduled pod's log is empty (pkg/registry/core/pod/strategy.go LogLocation: no host, no location)
    ("logs", ["logs", "worker-0", "-n", "conf"], 0, [], [r"."]),
    ("top", ["top", "pods", "-n", "conf"], 1, [r"Metrics API not available"], []),
    ("delete", ["delete", "hj", "train", "-n", "conf"], 0, [r'heterojob.heterojob.io "train" deleted'], []),
    ("gone", ["get", "hj", "train", "-n", "conf"], 1, [r'heterojobs.heterojob.io "train" not found'], []),
]


@pytest.mark.parametrize("kubectl", _kubectls() or [pytest.param("", marks=pytest.mark.skip("no kubectl"))])
def test_kubectl_commands(cluster: tuple[Emulator, Path], kubectl: str) -> None:
    emulator, work = cluster
    emulator.reset()
    assert len(COMMANDS) >= 25
    failures = []
    for name, args, code, must, must_not in COMMANDS:
        result = _run(kubectl, emulator, work, *args, timeout=4 if "-w" in args else 30)
        out = result.stdout + result.stderr
        problems = [f"exit {result.returncode} != {code}"] if result.returncode != code else []
        problems += [f"no match for {m!r}" for m in must if not re.search(m, out, re.M)]
        problems += [f"unexpected {m!r}" for m in must_not if re.search(m, out, re.M)]
        if problems:
            failures.append(f"kubectl {' '.join(args)} [{name}]: {'; '.join(problems)}\n{out.strip()[:800]}")
    assert not failures, f"{kubectl} (1.{_minor(kubectl)}):\n" + "\n\n".join(failures)
