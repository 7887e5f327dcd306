"""README "Install on a cluster", every line of it, run as written (bash, the `kubectl` on PATH) in order against a
fresh emulator: first each `kubectl apply`/`create` line with `--dry-run=server` (checked, nothing stored), then
for real. The kustomizations are rendered by kubectl's own kustomize, offline."""

from __future__ import annotations

import os
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


def readme_install_lines() -> list[str]:
    """The block's commands, in order (comment lines left out; a line's trailing comment stays, bash ignores it)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Install on a cluster"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def readme_install_steps() -> list[list[str]]:
    return [shlex.split(line.split("  #")[0].strip(), posix=True) for line in readme_install_lines()]


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


def run(line: str, kubeconfig: Path, home: Path, dry_run: bool = False) -> subprocess.CompletedProcess[str]:
    command = line.partition("  #")[0]
    if dry_run:
        command = command.rstrip() + " --dry-run=server"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(home)}  # HOME: kubectl's discovery cache
    return subprocess.run(["bash", "-c", f"set -euo pipefail; {command}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_readme_install_works_in_one_pass(fresh: kubernetes.client.ApiClient, tmp_path: Path) -> None:
    api = fresh
    kubeconfig = tmp_path / "kubeconfig.yaml"  # what the fixture's Emulator wrote
    with pytest.raises(kubernetes.dynamic.exceptions.ResourceNotFoundError):  # fresh: no heterojob kinds yet
        dynamic(api).resources.get(api_version="heterojob.io/v1alpha1", kind="Region")
    core = kubernetes.client.CoreV1Api(api)
    assert "team-a" not in {n.metadata.name for n in core.list_namespace().items}
    lines = readme_install_lines()
    steps = readme_install_steps()
    assert all(s[0] == "kubectl" for s in steps), steps
    assert [s[1] for s in steps][:5] == ["apply", "-n", "apply", "wait", "apply"], steps
    done = []
    for line, args in zip(lines, steps, strict=True):
        writes = args[1] == "apply" or args[1:4] == ["-n", "heterojob-system", "create"]
        if writes:
            objects = objects_of(args) if args[1] == "apply" else [
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": args[6], "namespace": "heterojob-system"}}]
            before = [exists(api, obj) for obj in objects]
            checked = run(line, kubeconfig, tmp_path, dry_run=True)
            assert checked.returncode == 0, f"{line} --dry-run=server: {checked.stderr}"
            assert [exists(api, obj) for obj in objects] == before, f"{line}: the dry run stored something"
        result = run(line, kubeconfig, tmp_path)
        assert result.returncode == 0, f"{line}: {result.stdout}{result.stderr}"
        if writes:
            assert all(exists(api, obj) for obj in objects), line
        done.append(" ".join(args))
    assert len(done) == len(lines)  # every line ran
    assert any("crds/" in d for d in done) and any("overlays/plain" in d for d in done)
    custom = kubernetes.client.CustomObjectsApi(api)
    assert len(custom.list_cluster_custom_object("heterojob.io", "v1alpha1", "acceleratorclasses")["items"]) >= 3
    apps = kubernetes.client.AppsV1Api(api)
    assert apps.read_namespaced_deployment("heterojob-operator", "heterojob-system").spec.replicas == 2
    jobs = custom.list_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs")["items"]
    assert [j["metadata"]["name"] for j in jobs] == ["llama-finetune"]
    assert "llama-finetune" in result.stdout  # the last line, `kubectl get heterojob-all -A`, lists the job
