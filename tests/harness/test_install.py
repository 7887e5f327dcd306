"""The install in the README's order against the emulator, each step first as a server-side dry run
(`dryRun=All`: checked, nothing stored) and then for real, as `kubectl apply --dry-run=server` and
`kubectl apply` would. The kustomizations are rendered by kubectl's own kustomize (v1.32), offline."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from heterojob.sim.cluster.harness import Emulator, dynamic

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]


def readme_install_steps() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Install on a cluster"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    steps = []
    for line in block.group(1).splitlines():
        line = line.split("  #")[0].strip()
        if line.startswith("kubectl"):
            steps.append(shlex.split(line, posix=True))
    return steps


def objects_of(args: list[str]) -> list[dict[str, Any]]:
    """What `kubectl apply -f PATH... / -k DIR` sends: files of a directory (.yaml/.yml/.json, not recursive)."""
    out: list[dict[str, Any]] = []
    if "-k" in args:
        rendered = subprocess.run(["kubectl", "kustomize", str(ROOT / args[args.index("-k") + 1])], check=True,
                                  capture_output=True, text=True).stdout
        return [d for d in yaml.safe_load_all(rendered) if d]
    for i, arg in enumerate(args):
        if arg == "-f":
            path = ROOT / args[i + 1]
            files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json")) if path.is_dir() \
                else [path]
            out += [d for p in files for d in yaml.safe_load_all(p.read_text()) if d]
    return out


def submit(api: kubernetes.client.ApiClient, obj: dict[str, Any], dry_run: bool) -> None:
    dyn = dynamic(api)
    res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])  # ResourceNotFoundError: no mapping
    namespace = obj["metadata"].get("namespace") if res.namespaced else None
    try:
        res.create(body=obj, namespace=namespace, **({"dry_run": "All"} if dry_run else {}))
    except kubernetes.dynamic.exceptions.ConflictError:
        pass  # exists: kubectl apply patches it


def exists(api: kubernetes.client.ApiClient, obj: dict[str, Any]) -> bool:
    dyn = dynamic(api)
    res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        res.get(name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace") if res.namespaced else None)
        return True
    except kubernetes.dynamic.exceptions.NotFoundError:
        return False


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[kubernetes.client.ApiClient]:
    """An emulator of its own: no CRD registered yet, as on a fresh cluster."""
    with Emulator(tmp_path) as emu:
        api = emu.client()
        yield api
        api.close()


def test_the_readme_install_works_in_one_pass(fresh: kubernetes.client.ApiClient) -> None:
    api = fresh
    with pytest.raises(kubernetes.dynamic.exceptions.ResourceNotFoundError):  # fresh: no heterojob kinds yet
        dynamic(api).resources.get(api_version="heterojob.io/v1alpha1", kind="Region")
    steps = readme_install_steps()
    assert [s[1] for s in steps][:5] == ["apply", "-n", "apply", "wait", "apply"], steps
    done = []
    for args in steps:
        if "examples/" in " ".join(args) or "prometheus-operator" in " ".join(args) or args[1] == "get":
            continue  # the examples need the team's namespace; the ServiceMonitor needs the Prometheus Operator
        if args[1:4] == ["-n", "heterojob-system", "create"]:
            objects = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": args[6],
                        "namespace": "heterojob-system"}, "stringData": {"token": "x"}}]
        elif args[1] == "wait":
            discovery = dynamic(api).resources
            for crd in objects_of(args):
                discovery.get(api_version=f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}",
                              kind=crd["spec"]["names"]["kind"])  # served
            continue
        else:
            assert args[1] == "apply", args
            objects = objects_of(args)
        before = [exists(api, obj) for obj in objects]
        for obj in objects:
            submit(api, obj, dry_run=True)
        assert [exists(api, obj) for obj in objects] == before, f"{args}: the dry run stored something"
        for obj in objects:
            submit(api, obj, dry_run=False)
        done.append(" ".join(args))
    assert any("crds/" in d for d in done) and any("overlays/plain" in d for d in done)
    custom = kubernetes.client.CustomObjectsApi(api)
    assert len(custom.list_cluster_custom_object("heterojob.io", "v1alpha1", "acceleratorclasses")["items"]) >= 3
    apps = kubernetes.client.AppsV1Api(api)
    assert apps.read_namespaced_deployment("heterojob-operator", "heterojob-system").spec.replicas == 2
