"""Files generated from the code: CRDs from the API types, default objects from the embedded defaults."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from heterojob import dashboard, defaults
from heterojob.alerts import rules
from heterojob.api import crds

HEADER = "# Generated from heterojob.defaults by `heterojob generate`. Do not edit by hand.\n"


def _defaults_files() -> dict[str, str]:
    classes = [defaults.accelerator_class(n) for n in defaults.ACCELERATOR_CLASSES]
    regions = [defaults.region(n) for n in defaults.REGIONS]
    return {
        "manifests/defaults/accelerator-classes.yaml": HEADER + yaml.safe_dump_all(classes, sort_keys=False),
        "manifests/defaults/regions.yaml": HEADER + yaml.safe_dump_all(regions, sort_keys=False),
    }


def _alert_files() -> dict[str, str]:
    head = HEADER.replace("heterojob.defaults", "heterojob.alerts.rules")
    return {
        "manifests/alerts/heterojob-rules.yaml": head + yaml.safe_dump(rules.rules_file(), sort_keys=False),
        "manifests/alerts/prometheusrule.yaml": head + yaml.safe_dump(rules.prometheus_rule(), sort_keys=False),
        "manifests/alerts/alertmanager-receiver.yaml": head + "# merge into alertmanager.yml\n"
        + yaml.safe_dump(rules.alertmanager_receiver(), sort_keys=False),
        "manifests/grafana/heterojob-dashboard.json": json.dumps(dashboard.dashboard(), indent=2) + "\n",
    }


def files() -> dict[str, str]:
    out = {f"crds/{crds.crd_path(Path('.'), r).name}": crds.render(r) for r in crds.RESOURCES}
    out.update(_defaults_files())
    out.update(_alert_files())
    return out


def drifted(root: Path) -> list[str]:
    return [rel for rel, text in files().items() if not (root / rel).exists() or (root / rel).read_text() != text]


def write(root: Path) -> list[str]:
    written = []
    for rel, text in files().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(rel)
    return written
