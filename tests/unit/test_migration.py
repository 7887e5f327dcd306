"""Migration: the pure judge of `engine.capacity.migration` on plain data."""

from __future__ import annotations

from heterojob.engine.capacity.migration import DEVICE_FAILED, MANUAL, OVERHEAT, STRAGGLER, Rules, Symptom, judge

ALL = frozenset({DEVICE_FAILED, OVERHEAT, STRAGGLER, MANUAL})
RULES = Rules(triggers=ALL, overheat_for_s=120, straggler_for_s=300, cooldown_s=600, max_per_hour=3, budget=2)


def test_a_failed_device_acts_at_once_and_urgently() -> None:
    v = judge([Symptom(DEVICE_FAILED, 1000.0, ("n1",), "fatal XID 79", urgent=True)], RULES, 1000.0, [], 0)
    assert v.act and v.symptom is not None and v.symptom.urgent


def test_overheat_must_persist_before_anything_happens() -> None:
    hot = Symptom(OVERHEAT, 1000.0, ("n1",), "overheat 95°C")
    held = judge([hot], RULES, 1060.0, [], 0)
    assert not held.act and held.reason == "holding: overheat for 60s of 120s"
    assert judge([hot], RULES, 1120.0, [], 0).act


def test_cooldown_hourly_cap_budget_and_advisory_hold_a_voluntary_move() -> None:
    manual = [Symptom(MANUAL, 5000.0, ("n1",), "migration requested: drain")]
    v = judge(manual, RULES, 5000.0, [4800.0], 0)
    assert not v.act and v.reason == "cooldown: 400s left after the last move"
    v = judge(manual, RULES, 5000.0, [1500.0, 2200.0, 3000.0], 0)
    assert not v.act and "3 moves in the last hour" in v.reason
    v = judge(manual, RULES, 5000.0, [], 2)
    assert not v.act and v.reason == "disruption budget: 2 of 2 jobs already moving"
    advisory = Rules(triggers=ALL, advisory=True)
    v = judge(manual, advisory, 5000.0, [], 0)
    assert not v.act and v.reason.startswith("advisory mode: would migrate")


def test_an_involuntary_move_is_never_held_by_cooldown_cap_or_budget() -> None:
    failed = [Symptom(DEVICE_FAILED, 5000.0, ("n1",), "fatal XID 79", urgent=True)]
    assert judge(failed, RULES, 5000.0, [4800.0], 0).act  # inside the cooldown
    assert judge(failed, RULES, 5000.0, [1500.0, 2200.0, 3000.0, 4000.0], 0).act  # past the hourly cap
    assert judge(failed, RULES, 5000.0, [], 5).act  # the budget full of other moves
    assert not judge(failed, Rules(triggers=ALL, advisory=True), 5000.0, [], 0).act  # advisory touches nothing


def test_disabled_triggers_are_ignored_and_urgent_symptoms_go_first() -> None:
    only_failed = Rules(triggers=frozenset({DEVICE_FAILED}))
    assert not judge([Symptom(STRAGGLER, 0.0, ("n1",), "slow")], only_failed, 9999.0, [], 0).act
    v = judge([Symptom(STRAGGLER, 0.0, ("n1",), "slow"), Symptom(DEVICE_FAILED, 9000.0, ("n2",), "xid", True)],
              RULES, 9999.0, [], 0)
    assert v.symptom is not None and v.symptom.trigger == DEVICE_FAILED


