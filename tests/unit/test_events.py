"""Every Event the operator posts has the type Kubernetes' convention gives its reason (Normal: done as it
should; Warning: needs attention), as `controller.events` lists them."""

from __future__ import annotations

import ast
from pathlib import Path

from heterojob.controller.events import FAULT_TRIGGERS, FIXED, move_event
from heterojob.engine.capacity import migration
from heterojob.engine.placing import spec_changes
from heterojob.engine.execution.lifecycle import REASON_INVALID_SPEC

PKG = Path(__file__).resolve().parents[2] / "operator" / "heterojob"


def _calls() -> list[tuple[str, int, ast.Call]]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if "sim" in path.relative_to(PKG).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "post_event":
                found.append((str(path.relative_to(PKG)), node.lineno, node))
    return found


def test_every_literal_event_reason_is_listed_with_the_type_it_is_posted_with() -> None:
    calls = _calls()
    assert len(calls) >= 15
    for where, line, call in calls:
        if len(call.args) < 3 or any(isinstance(a, ast.Starred) for a in call.args):
            continue  # move_event's (type, reason): checked below
        type_, reason = call.args[1], call.args[2]
        if isinstance(type_, ast.Constant) and isinstance(reason, ast.Constant):
            assert FIXED.get(reason.value) == type_.value, f"{where}:{line}: {type_.value} {reason.value}"


def test_the_lifecycles_reasons_are_listed_with_their_type() -> None:
    assert FIXED[REASON_INVALID_SPEC] == "Warning" and FIXED["Unschedulable"] == "Warning"
    assert FIXED["BackoffLimitExceeded"] == "Warning" and FIXED["AllReplicasSucceeded"] == "Normal"
    assert FIXED[spec_changes.REASON_DEFERRED] == FIXED[spec_changes.REASON_APPLIED] == "Normal"  # a spec edit read


def test_a_requested_migration_resize_and_preemption_are_normal_a_move_from_a_fault_or_lost_work_a_warning() -> None:
    assert move_event("migrate", migration.MANUAL, True) == ("Normal", "Migrating")
    assert move_event("resize", "grow", True) == ("Normal", "Resizing")
    assert move_event("resize", "reclaim", True) == ("Normal", "Resizing")
    assert move_event("preempt", None, True) == ("Normal", "Preempted")  # as kube-scheduler reports a victim
    for trigger in (migration.DEVICE_FAILED, migration.NODE_NOT_READY, migration.OVERHEAT, migration.STRAGGLER,
                    migration.ALERT):
        assert trigger in FAULT_TRIGGERS and move_event("migrate", trigger, True) == ("Warning", "Migrating")
    assert move_event("migrate", migration.MANUAL, False) == ("Warning", "Migrating")  # the checkpoint never came
    assert move_event("preempt", None, False) == ("Warning", "Preempted")
