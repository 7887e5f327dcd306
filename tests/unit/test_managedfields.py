"""managedfields.sent: the ownership a write that sets managedFields starts from, as kube-apiserver v1.32 decides it
(k8s.io/apimachinery pkg/util/managedfields/internal/fieldmanager.go decodeLiveOrNew, isResetManagedFields)."""

from __future__ import annotations

from heterojob.sim.cluster import managedfields

LIVE = [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "heterojob.io/v1alpha1",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:priority": {}}}}]
MOVED = [{"manager": "kubectl", "operation": "Apply", "apiVersion": "heterojob.io/v1alpha1",
          "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:priority": {}}}}]


def test_a_valid_list_replaces_the_stored_one() -> None:
    assert managedfields.sent(MOVED, LIVE) == MOVED


def test_an_empty_list_or_one_empty_entry_resets_ownership() -> None:
    assert managedfields.sent([], LIVE) == []
    assert managedfields.sent([{}], LIVE) == []


def test_entries_owning_nothing_are_dropped() -> None:
    assert managedfields.sent([{**MOVED[0], "fieldsV1": {}}], LIVE) == []
    assert managedfields.sent([{**LIVE[0], "fieldsV1": {}}, *MOVED], LIVE) == MOVED


def test_absent_or_undecodable_keeps_the_stored_one() -> None:
    assert managedfields.sent(None, LIVE) == LIVE
    assert managedfields.sent([{**MOVED[0], "fieldsType": "FieldsV2"}, *MOVED], LIVE) == LIVE
    assert managedfields.sent("bad", LIVE) == LIVE
