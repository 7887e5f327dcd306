"""Compute discovery, acted on: AcceleratorClass status and the discovery report.

Step of the pipeline: reads the live Nodes and AcceleratorClasses, asks `engine.placing.discovery` what the fleet
has, and writes (only what changed):
- each AcceleratorClass's `status.nodes`, `status.devices` and `status.software` (oldest and newest
  driver/CUDA/CANN across its nodes' labels); this module is the one writer of that status;
- the discovery report, a ConfigMap (`heterojob-discovery` in the operator's namespace): `proposed.yaml`
  holds an AcceleratorClass manifest for every device model no class covers (`kubectl apply -f` ready),
  `report.json` the same with node counts and software ranges, and every class's observed figures;
- with `create_classes` (flag `--create-discovered-classes`), the proposed classes themselves.
Runs on Node and AcceleratorClass events (coalesced) and at least every `interval` seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes.client import ApiException

from heterojob.constants import API_VERSION
from heterojob.engine.placing import discovery
from heterojob.engine.capacity.fleet import DeviceClass, Node
from heterojob.kube.api import Kube

log = logging.getLogger("heterojob.discovery")


@dataclass(frozen=True)
class DiscoveryConfig:
    namespace: str = "heterojob-system"  # where the report ConfigMap lives (the operator's namespace)
    report: str = "heterojob-discovery"
    create_classes: bool = False  # create proposed AcceleratorClasses, not only report them
    settle_s: float = 0.5  # a burst of Node events is one sync


class Discovery:
    def __init__(self, kube: Kube, nodes: Callable[[], Mapping[str, Node]],
                 classes: Callable[[], Mapping[str, DeviceClass]], config: DiscoveryConfig | None = None) -> None:
        self.kube = kube
        self.nodes = nodes
        self.classes = classes
        self.config = config or DiscoveryConfig()
        self._written: dict[str, dict[str, Any]] = {}
        self._report: dict[str, str] | None = None
        self._created: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def poke(self) -> None:
        """A Node or class changed: sync soon (coalesced)."""
        self._wake.set()

    def start(self, interval: float) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(interval), name="discovery")
        self.poke()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self, interval: float) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=interval)
            except TimeoutError:
                pass
            await asyncio.sleep(self.config.settle_s)
            self._wake.clear()
            try:
                await self.sync()
            except Exception as exc:  # noqa: BLE001 - retried on the next event or interval
                log.warning("discovery sync failed: %s", exc)

    async def sync(self) -> None:
        async with self._lock:
            nodes, classes = dict(self.nodes()), dict(self.classes())
            observed = discovery.observed(nodes.values(), classes)
            for name, figures in sorted(observed.items()):
                status = figures.as_status()
                if self._written.get(name) != status:
                    await self.kube.patch_class_status(name, status)
                    self._written[name] = status
            proposals = discovery.proposals(nodes.values(), classes)
            if self.config.create_classes:
                for proposal in proposals:
                    if proposal.name in self._created:
                        continue
                    if await self.kube.create_class(proposal.manifest(API_VERSION)):
                        log.info("created AcceleratorClass %s for %s (%d node(s)); set its throughput",
                                 proposal.name, proposal.spec.get("displayName"), len(proposal.nodes))
                    self._created.add(proposal.name)
            data = self.report(proposals, observed)
            if data != self._report:
                new = [p for p in proposals
                       if self._report is None or f"name: {p.name}\n" not in self._report.get("proposed.yaml", "")]
                try:
                    await self.kube.write_config_map(self.config.namespace, self.config.report, data,
                                                     {"app.kubernetes.io/managed-by": "heterojob"})
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    log.warning("no discovery report: namespace %s does not exist (set --discovery-namespace)",
                                self.config.namespace)
                    new = []
                report = {"metadata": {"name": self.config.report, "namespace": self.config.namespace}}
                for proposal in new:
                    message = (f"device model {proposal.spec.get('displayName')} on {len(proposal.nodes)} node(s) "
                               f"has no AcceleratorClass: proposed {proposal.name} (proposed.yaml)")
                    log.info("%s in ConfigMap %s/%s", message, self.config.namespace, self.config.report)
                    self.kube.post_event(report, "Normal", "ClassProposed", message, ("v1", "ConfigMap"))
                self._report = data

    def report(self, proposals: list[discovery.Proposal], observed: Mapping[str, discovery.Observed]
               ) -> dict[str, str]:
        manifests = [p.manifest(API_VERSION) for p in proposals]
        body = {"proposed": [p.summary() for p in proposals],
                "classes": {name: figures.as_status() for name, figures in sorted(observed.items())},
                "createClasses": self.config.create_classes}
        header = ("# AcceleratorClasses heterojob proposes for device models no class covers.\n"
                  "# Review (set throughput), then: kubectl apply -f <this file>\n")
        return {"proposed.yaml": header + (yaml.safe_dump_all(manifests, sort_keys=False) if manifests else ""),
                "report.json": json.dumps(body, indent=1, sort_keys=True)}
