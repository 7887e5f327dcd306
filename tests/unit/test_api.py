"""API types: defaults, every problem reported at once, and the CRDs generated from the same types."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from heterojob import defaults
from heterojob.api import HeteroJobSpec, SpecError, parse_spec
from heterojob.api.accelerator import AcceleratorClassSpec
from heterojob.api.common import check_object_name
from heterojob.api.quota import HeteroQuotaSpec
from heterojob.api.region import RegionSpec
from heterojob.api import crds
from heterojob.api.names import LABEL_KEY_RE, label_key_problem
from heterojob.api.template import problems
from heterojob.sim.cluster.builtin import validate_tolerations

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "train:1"}]}}


def test_defaults_fill_a_minimal_job() -> None:
    spec = parse_spec(HeteroJobSpec, {"devices": [{"deviceClass": "cpu"}], "template": TEMPLATE})
    assert spec.priority == "medium"
    assert (spec.replicas.min, spec.replicas.upper, spec.replicas.start) == (1, 1, 1)
    assert spec.devices[0].per_replica == 1 and spec.backoff_limit == 3
    assert spec.policy.allow_cross_region is False and spec.checkpoint.timeout_seconds == 120


def test_elastic_replicas_start_at_initial_or_max() -> None:
    spec = parse_spec(HeteroJobSpec, {"replicas": {"min": 2, "max": 8}, "devices": [{"deviceClass": "cpu"}],
                                      "template": TEMPLATE})
    assert spec.replicas.start == 8
    spec = parse_spec(HeteroJobSpec, {"replicas": {"min": 2, "max": 8, "initial": 4},
                                      "devices": [{"deviceClass": "cpu"}], "template": TEMPLATE})
    assert spec.replicas.start == 4


def test_every_problem_is_reported_at_once_with_its_path() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(HeteroJobSpec, {"priority": "critical", "devices": [{"deviceClass": "cpu", "perReplica": 0}],
                                   "template": TEMPLATE, "backoffLimit": -1, "replica": 2})
    assert err.value.paths == ["spec.priority", "spec.devices[0].perReplica", "spec.backoffLimit", "spec.replica"]
    text = str(err.value)
    assert "'urgent', 'high', 'medium' or 'low'" in text  # what would be accepted
    assert "accepted: priority, replicas, devices" in text  # the fix for a typo


@pytest.mark.parametrize("name, ok", [("train", True), ("train-2", True), ("Train", False), ("a.b", False),
                                      ("-x", False), ("x" * 46, False)])
def test_job_names_must_be_dns_labels_with_room_for_pod_suffixes(name: str, ok: bool) -> None:
    assert (check_object_name(name, 45) == []) is ok


def test_quota_rejects_negative_counts_and_duplicates() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(HeteroQuotaSpec, {"limits": [{"deviceClass": "nvidia-h100", "devices": -1},
                                                {"deviceClass": "cpu", "region": "Not A Region", "devices": 1}]})
    assert err.value.paths == ["spec.limits[0].devices", "spec.limits[1].region"]
    # Cross-item checks run once every item is valid on its own (a pydantic limit; see the closing note).
    with pytest.raises(SpecError) as err:
        parse_spec(HeteroQuotaSpec, {"limits": [{"deviceClass": "nvidia-h100", "region": "*", "devices": 16},
                                                {"deviceClass": "nvidia-h100", "devices": 8}]})
    assert err.value.paths == ["spec.limits"]
    assert "two limits for deviceClass='nvidia-h100' region='*'" in str(err.value)


def test_region_location_bounds() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(RegionSpec, {"location": {"city": "Nowhere", "latitude": 91, "longitude": -181}})
    assert err.value.paths == ["spec.location.latitude", "spec.location.longitude"]


def test_embedded_defaults_are_valid() -> None:
    for spec in defaults.ACCELERATOR_CLASSES.values():
        parse_spec(AcceleratorClassSpec, spec)
    for spec in defaults.REGIONS.values():
        parse_spec(RegionSpec, spec)


def test_crds_in_the_repository_match_the_api_types() -> None:
    stale = crds.drifted(ROOT / "crds")
    assert not stale, f"crds/ drifted from heterojob.api: {stale}; run `heterojob generate`"


def test_crd_schemas_are_structural() -> None:
    def walk(node: dict, path: str) -> None:
        assert "$ref" not in node and "anyOf" not in node, path
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        if node.get("additionalProperties") is False:
            raise AssertionError(f"{path}: additionalProperties false is not structural")
        for name, sub in (node.get("properties") or {}).items():
            walk(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    for res in crds.RESOURCES:
        version = crds.crd(res)["spec"]["versions"][0]
        walk(version["schema"]["openAPIV3Schema"], res.kind)
        assert version["subresources"] == {"status": {}}


def test_heterojob_crd_has_printer_columns_short_name_and_enums() -> None:
    crd = crds.crd(crds.HeteroJob)
    assert crd["spec"]["names"]["shortNames"] == ["hj"]
    assert crds.crd(crds.HeteroQuota)["spec"]["names"]["shortNames"] == ["hq"]
    version = crd["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]][:6] == \
        ["Phase", "Class", "Region", "Replicas", "Util", "Age"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["priority"]["enum"] == ["urgent", "high", "medium", "low"]
    assert spec["properties"]["replicas"]["properties"]["min"]["minimum"] == 1
    assert set(spec["required"]) == {"devices", "template"}
    assert spec["properties"]["template"].get("x-kubernetes-preserve-unknown-fields") is True


def test_manifests_defaults_match_the_embedded_defaults() -> None:
    from heterojob import generate

    stale = generate.drifted(ROOT)
    assert not stale, f"generated files drifted: {stale}; run `heterojob generate`"


TOLERATIONS = [  # (toleration, whether kube-apiserver v1.32's ValidateTolerations accepts it)
    ({"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}, True),
    ({"operator": "Exists"}, True),  # every taint
    ({"key": "a", "value": "b", "effect": "NoSchedule"}, True),  # operator Equal by default
    ({"key": "a", "operator": "Exists", "value": "v"}, False),
    ({"key": "a", "effect": "NoSchedule", "tolerationSeconds": 3}, False),
    ({"key": "a", "tolerationSeconds": 3}, False),
    ({"operator": "Equal", "value": "x"}, False),
    ({"value": "x"}, False),
    ({"key": "a", "operator": "In"}, False),
    ({"key": "a", "effect": "NoEvict"}, False),
    # an empty operator is Equal and an empty effect matches every effect, as v1.32 reads them
    ({"key": "a", "operator": "", "value": "b"}, True),
    ({"key": "a", "effect": ""}, True),
    ({"key": "example.com/gpu-health", "operator": "Exists"}, True),
    ({"key": "a", "operator": "Exists", "tolerationSeconds": None}, True),  # null is unset
    ({"key": "bad key!", "operator": "Exists"}, False),  # a key is a qualified name
    ({"key": "a" * 64, "operator": "Exists"}, False),
    ({"key": "a", "value": "not a label value!"}, False),  # Equal's value is a label value
    ({"key": "a", "value": "x" * 64}, False),
    ({"key": "a" * 251 + ".io/x", "operator": "Exists"}, False),  # a prefix of 254 (at most 253)
    ({"key": "a" * 249 + ".io/x", "operator": "Exists"}, True),
    ({"key": "Example.com/x", "operator": "Exists"}, False),  # the prefix is a lower-case DNS-1123 subdomain
    # kube-apiserver v1.32's lists, written out (pkg/apis/core/validation validateTaintEffect and
    # ValidateTolerations), not read from the constants under test; a letter off is refused by both checks
    *(({"key": "a", "operator": "Exists", "effect": effect}, True)
      for effect in ("NoSchedule", "PreferNoSchedule", "NoExecute")),
    *(({"key": "a", "operator": operator, "effect": "NoSchedule"}, True) for operator in ("Equal", "Exists")),
    *(({"key": "a", "operator": "Exists", "effect": effect}, False)
      for effect in ("Noschedule", "NoExecution", "noSchedule", "PreferNoschedule")),
    *(({"key": "a", "operator": operator, "effect": "NoSchedule"}, False)
      for operator in ("Equals", "exists", "Exist")),
]

# Label keys as kube-apiserver v1.32's IsQualifiedName takes them (a Node's labels, `requires.nodeLabels`)
LABEL_KEYS = [
    ("feature.node.kubernetes.io/rdma.available", True),
    ("a" * 63, True),
    ("a" * 64, False),  # a name part of 64
    ("example.com/" + "b" * 63, True),
    ("example.com/" + "b" * 64, False),
    ("a..b/x", False),  # a prefix with an empty label
    ("Example.com/x", False),  # the prefix is lower case
    ("-a.com/x", False),
    ("/x", False),
    ("a/b/c", False),
    ("a" * 249 + ".io/x", True),
    ("a" * 251 + ".io/x", False),  # a prefix of 254
]


@pytest.mark.parametrize(("key", "valid"), LABEL_KEYS)
def test_a_node_label_key_no_node_can_carry_is_refused_with_its_field(key: str, valid: bool) -> None:
    """Before, `requires.nodeLabels` took keys such as a 64-character name part or the prefix 'a..b' (its own
    looser pattern): no Node can carry them, so the job waited for ever instead of being refused."""
    import re

    assert (label_key_problem(key) is None) is valid and bool(re.fullmatch(LABEL_KEY_RE, key)) is valid
    job = {"devices": [{"deviceClass": "cpu", "requires": {"nodeLabels": {key: "true"}}}], "template": TEMPLATE}
    if valid:
        assert parse_spec(HeteroJobSpec, job).devices[0].requires.node_labels == {key: "true"}
        return
    with pytest.raises(SpecError) as raised:
        parse_spec(HeteroJobSpec, job)
    (problem,) = raised.value.problems
    assert problem.path.startswith("spec.devices[0].requires.nodeLabels")
    assert label_key_problem(key) in problem.message  # which part is wrong and the fix, not a bare regex


@pytest.mark.parametrize(("name", "valid"), [("nvidia.com/gpu", True), ("cpu", True), ("a..b/gpu", False),
                                             ("example.com/" + "g" * 64, False), ("huawei.com/Ascend910", True)])
def test_an_accelerator_class_resource_name_is_a_qualified_name(name: str, valid: bool) -> None:
    spec = {"vendor": "nvidia", "resourceName": name}
    if valid:
        assert parse_spec(AcceleratorClassSpec, spec).resource_name == name
        return
    with pytest.raises(SpecError, match="resourceName"):
        parse_spec(AcceleratorClassSpec, spec)


@pytest.mark.parametrize(("toleration", "valid"), TOLERATIONS)
def test_template_tolerations_are_refused_up_front_as_the_api_server_would(toleration: dict[str, Any],
                                                                           valid: bool) -> None:
    """A bad toleration fails the spec with its path and the rule, instead of every pod create being refused;
    the rules agree with the emulated API server's (`sim.cluster.builtin.validate_tolerations`)."""
    found = problems({"spec": {"containers": [{"name": "m", "image": "x"}], "tolerations": [toleration]}})
    assert (not found) is valid and (not validate_tolerations([toleration], "spec.tolerations")) is valid
    assert all(path.startswith(".spec.tolerations[0]") for path, _ in found)


def test_the_structural_schema_is_the_same_whatever_the_pydantic_version_emits() -> None:
    """pydantic 2.8 wraps a described $ref in a one-item allOf, and up to 2.10 writes a float field's bound 90
    as 90.0, and each version orders keywords its own way: `heterojob generate --check` must hold on every
    pydantic pyproject.toml allows, so these all render alike (checked by hand on 2.8 to 2.14)."""
    structural = crds.structural
    defs = {"Priority": {"type": "string", "enum": ["high", "low"]}}
    wrapped = structural({"allOf": [{"$ref": "#/$defs/Priority"}], "description": "p", "default": "low"}, defs)
    plain = structural({"default": "low", "$ref": "#/$defs/Priority", "description": "p"}, defs)
    assert wrapped == plain == {"description": "p", "type": "string", "enum": ["high", "low"], "default": "low"}
    assert list(wrapped) == list(plain)  # one keyword order
    bounds = structural({"type": "number", "maximum": 90.0, "exclusiveMinimum": 0.5})
    assert bounds == {"type": "number", "minimum": 0.5, "exclusiveMinimum": True, "maximum": 90}
    assert isinstance(bounds["maximum"], int) and list(bounds) == ["type", "minimum", "exclusiveMinimum", "maximum"]


def test_a_templates_problems_are_checked_once_while_it_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs of a sweep share their pod template: its schema check (most of a new job's parse) runs once per
    template, and every job gets the same answer, problems included, as a list of its own."""
    from heterojob.api import template as template_module

    checked: list[Any] = []
    real = template_module._problems
    monkeypatch.setattr(template_module, "_problems", lambda t: checked.append(t) or real(t))
    monkeypatch.setattr(template_module, "_known", type(template_module._known)())
    good = {"spec": {"containers": [{"name": "main", "image": "x"}]}}
    bad = {"spec": {"containers": [{"name": "Main", "image": "x"}], "nodeName": "n1"}}
    first = problems(good)
    assert first == [] and problems({"spec": {"containers": [{"image": "x", "name": "main"}]}}) == []
    found = problems(bad)
    assert found == real(bad) and len(found) == 2
    found.clear()  # the caller's list is its own
    assert problems(bad) == real(bad)
    assert len(checked) == 2  # once each: key order does not make another template
    monkeypatch.setattr(template_module, "KEPT", 1)
    problems({"spec": {"containers": [{"name": "other", "image": "x"}]}})
    problems(good)  # forgotten: at most KEPT are remembered
    assert len(checked) == 4
