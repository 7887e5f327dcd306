"""A Kubernetes API server emulator for the test harness and the demo: kmock's KubernetesEmulator, repaired.

kmock 0.8 (by Kopf's author) serves API discovery well but stores objects as plain JSON without the
semantics that Kopf and the `kubernetes` client rely on (see docs/emulator.md). `ApiServerEmulator` keeps kmock's
HTTP server, discovery and resource registry, and serves every resource request from its own store with these real
API server semantics. It is built in layers, one module each, every layer a subclass of the one below, so a request's
flow keeps the order a real API server keeps (a write is checked and admitted before it is stored, and stored before
any watcher hears of it): registry.py (the state and what is served), storage.py (reads, resourceVersions, the watch
fan-out), rules.py (each kind's checks and admission), writes.py (create, update, patch, apply), deletion.py
(deletion and garbage collection), serving.py (the HTTP entry and routing by verb); this module puts them together
and serves them (`python -m heterojob.sim.cluster.apiserver`). What each step consults lives beside it: routes.py,
watches.py, schema.py, builtin.py, admission.py, tables.py, openapi.py, discovery.py, events.py, patching.py,
selectors.py, paging.py, scale.py, evictions.py, reviews.py, cascade.py, managedfields.py:

- `resourceVersion` (one global counter), `uid`, `creationTimestamp`, `generation` (bumped on spec
  changes), `metadata.namespace` from the URL; 201 on create; 409 `AlreadyExists` and 409 `Conflict` on
  a stale `resourceVersion` (merge patch, PUT, delete preconditions), worded with the qualified resource
  (`heterojobs.heterojob.io "x"`); 422 for a JSON patch that does not apply, 400 for one that does not decode;
  `generateName`; PUT (replace); `GET /version/`; `/api/v1/namespaces[/name]`; namespaced writes into a
  missing namespace answer 404; DNS-subdomain names.
- the status subresource: writes to the object ignore `status`, writes to `/status` change only status.
- merge, JSON and strategic-merge patches with their directives (see `patching.py`); custom resources refuse
  strategic merge patches (415), as apiextensions-apiserver does.
- list pagination (`limit`/`continue`, `remainingItemCount`; paging.py); field selectors limited to the field
  labels each resource converts (selectors.py; 400 "field label not supported"); `/healthz`, `/livez`, `/readyz`;
  any other unknown path answers the real 404 Status.
- subresources: `scale` (built-in workloads, CRDs that declare it; scale.py), `pods/eviction` with
  PodDisruptionBudgets (429 when a budget allows no disruption; evictions.py; budgets are read with the status the
  disruption controller would keep), `pods/binding`; `pods/log|exec|attach|portforward` and `*/proxy` make
  kube-apiserver's pod/container checks, then answer as when the node's kubelet cannot be dialled (500 "error
  dialing backend"; an unscheduled pod's log is empty); review resources (`kubectl auth can-i|whoami`) answered for
  the requesting user as RBAC would (reviews.py).
- service account tokens (TokenRequest, `serviceaccounts/token`) and RBAC for the requests made with them; any
  other token is the admin's (auth.py).
- finalizers and `deletionTimestamp`; deleting a namespace deletes what is in it; owner-reference
  garbage collection (background: an object is collected when all its owners are gone; orphan: the `orphan`
  finalizer until the owner's references are removed; foreground: the `foregroundDeletion` finalizer until no
  blocking dependent is left; cascade.py); an object made for owners already absent is collected a lag later
  (collector.py).
- field ownership of custom resources (`metadata.managedFields`, server-side apply conflicts; managedfields.py).
- watches: `labelSelector`, `fieldSelector`, `timeoutSeconds`, resume from a `resourceVersion` (410
  `Expired` when it is older than the bounded event history), ADDED/DELETED when an object enters or
  leaves a selector.
- a CustomResourceDefinition created (or updated) through the API registers its resource for discovery, gets the
  status its controllers write (NamesAccepted, Established: crdstatus.py), and
  its `openAPIV3Schema` is enforced from then on (`schema.py`: pruning of undeclared fields, defaults, types,
  enums, bounds, patterns, required; the status subresource too); ObjectMeta and pods are validated as
  kube-apiserver v1.32 does (`builtin.py`; pod specs are immutable, `pods/binding` sets the node); 422
  `Invalid` with kube's wording; 413 over 3 MiB; `dryRun=All`; `fieldValidation` (Warn: a `Warning` header;
  Strict: 400); PodSecurity, ResourceQuota and ServiceAccount admission, and DefaultTolerationSeconds (a pod's
  not-ready/unreachable NoExecute tolerations, 300 s) (`admission.py`).
- what kubectl reads: `meta.k8s.io/v1` Tables (`tables.py`), `/openapi/v2` (protobuf or JSON) and `/openapi/v3`
  (`openapi.py`), `events.k8s.io/v1` as a view of core Events (`events.py`), discovery listing subresources
  as a real server does (`discovery.py`); no metrics API.
- bounded memory: one version per object, a bounded event history and request log.
- a Node created without them gets a `spec.podCIDR` and an InternalIP (`ipam.py`: what kind's node IPAM
  controller and kubelet registration give it); the simulated kubelet gives each pod its own IP from it.

Still different from a real API server (tests must not rely on these):
- no admission webhooks, no CEL (`x-kubernetes-validations`), ratcheting only of whole top-level fields (an
  update's unchanged `spec`, e.g. a status write's, is not validated again; a changed one is, all of it); built-in
  kinds other than pods,
  services and namespaces get only ObjectMeta checks; undeclared fields of built-in kinds are pruned (and
  OpenAPI has their schemas) only when the `kubernetes-validate` package is installed (it carries the v1.32
  definitions); no defaulting of built-in kinds beyond a pod's common fields;
- deleting a CRD does not unregister its resource;
- server-side apply on built-in kinds without field ownership (no managedFields, no conflicts); no `$patch`
  directives in strategic merge patches merge by key only for the core lists patching.py names; protobuf request
  bodies only for the kinds and fields protobuf.py decodes (the rest, e.g. `kubectl autoscale`, answer 415);
- a namespace's pods go at once when it is deleted;
- authentication and RBAC only for service account tokens this server issued (auth.py): every other request is
  the admin's; no bookmarks; a continued list reads current objects (no snapshot at the first page's resourceVersion, no 410);
- no controllers: deployments/jobs create no pods, a PodDisruptionBudget's expected pods are the pods it selects;
- field selectors on resources without a known field-label list (selectors.FIELD_LABELS) accept any path.
"""


from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import attrs
import kmock
import yaml
from typing_extensions import override

from heterojob.sim.cluster.serving import Serving

# `kubectl version`'s server half: what the v1.32.0 release binaries answer on /version
# (k8s.io/component-base/version, gitCommit of the v1.32.0 tag)
SERVER_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0",
                  "gitCommit": "70d3cc986aa8221cd1dfb1121852688902d3bf53", "gitTreeState": "clean",
                  "buildDate": "2024-12-11T17:59:15Z", "goVersion": "go1.23.3", "compiler": "gc",
                  "platform": "linux/amd64"}


@attrs.define(kw_only=True)
class ApiServerEmulator(Serving):
    """See the module docstring. Use `resources.load_bundled()` and create CRDs, or `register()`."""

    @override
    async def _serve_server_version(self, request: Any) -> dict[str, str]:
        """GET /version: kube-apiserver v1.32.0's answer (kmock's own says v1.26.4+k3s1)."""
        return dict(SERVER_VERSION)


def kubeconfig(server: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "heterojob-emulator",
        "clusters": [{"name": "heterojob-emulator", "cluster": {"server": server}}],
        "users": [{"name": "heterojob-emulator", "user": {"token": "emulator"}}],
        "contexts": [{"name": "heterojob-emulator",
                      "context": {"cluster": "heterojob-emulator", "user": "heterojob-emulator"}}],
    }


async def serve(host: str, port: int, kubeconfig_path: Path | None, crd_dir: Path | None,
                ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    emulator = ApiServerEmulator()
    emulator.load_builtins()
    emulator.ensure_system_namespaces()
    for path in sorted(crd_dir.glob("*.yaml")) if crd_dir else ():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                emulator._register_crd(doc)
    stop = stop or asyncio.Event()
    async with emulator, kmock.Server(emulator, host=host, port=port or None) as server:
        url = f"http://{host}:{server.port}"
        if kubeconfig_path:
            kubeconfig_path.write_text(yaml.safe_dump(kubeconfig(url)))
        print(f"READY {url}", flush=True)
        if ready is not None:
            ready.set()
        await stop.wait()
        emulator.close_watches()


def _raise_open_files() -> None:
    """Allow as many connections as the hard limit does (a fleet's clients and watches outgrow a soft 1024)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
    except (ImportError, ValueError, OSError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m heterojob.sim.cluster.apiserver",
                                     description="Serve the Kubernetes API emulator on a loopback port.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig pointing at the emulator here")
    parser.add_argument("--crds", type=Path, help="register the CRDs in this directory at start")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _raise_open_files()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(args.host, args.port, args.kubeconfig, args.crds, stop=stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
