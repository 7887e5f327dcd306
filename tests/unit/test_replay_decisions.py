"""The replay's running jobs take their next step from `engine.execution.running.decide` (`replay.decisions`), as the
operator's do: growth, shrink, upgrade moves and moves off a failed node, with no loop of the replay's own."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from heterojob.engine.execution import running
from heterojob.engine.execution.running import RunningDecision, Step
from heterojob.replay import decisions
from heterojob.replay.config import Config
from heterojob.replay.replay import _Replay
from heterojob.replay.traces import synthetic_trace

TABLE = Path(__file__).resolve().parents[2] / "data" / "gavel" / "isolated_throughputs.csv"
JOBS = synthetic_trace(160, 2, TABLE, seed=5)
CONFIG = Config(nodes_per_class_region=2, regions=2, devices_per_node=4, mtbf_h=2000, seed=5)


def test_every_resize_upgrade_and_restart_is_one_decide_let_act(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: Counter[Step] = Counter()

    def spy(*args: object) -> RunningDecision:
        d = running.decide(*args)  # type: ignore[arg-type]
        steps[d.step] += 1
        return d

    monkeypatch.setattr(decisions, "decide", spy)
    sim = _Replay(JOBS, "heterojob", CONFIG)
    sim.run()
    m = sim.metrics
    assert m.resizes > 0 and m.upgrades > 0 and m.restarts > 0
    assert m.resizes <= steps[Step.RESIZE] and m.upgrades <= steps[Step.UPGRADE]
    assert m.restarts == steps[Step.MIGRATE]  # a failed node's jobs: one involuntary move each


def test_a_replay_whose_decide_never_moves_a_job_resizes_upgrades_and_restarts_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decisions, "decide", lambda *args: RunningDecision(Step.NONE))
    sim = _Replay(JOBS, "heterojob", CONFIG)
    sim.run()
    m = sim.metrics
    assert m.failures > 0 and m.preemptions > 0  # the cycle still places and preempts
    assert m.resizes == m.upgrades == m.restarts == 0


def test_a_move_the_rules_hold_is_not_made() -> None:
    """With a cooldown longer than the replay, a job grows, shrinks or moves up at most once (and never after
    a preemption)."""
    sim = _Replay(JOBS, "heterojob", CONFIG)
    moves = sim.queue.running  # type: ignore[union-attr]
    rules = moves.rules.migration
    moves.rules = running.RunningRules(type(rules)(rules.triggers, cooldown_s=1e12, budget=rules.budget))
    moved: Counter[int] = Counter()
    resize, upgrade = moves.resize, moves.upgrade

    def counted(act: Callable[..., None]) -> Callable[..., None]:
        def wrapped(run: Any, *args: Any) -> None:
            before = sim.metrics.resizes + sim.metrics.upgrades
            act(run, *args)
            moved[run.job.id] += sim.metrics.resizes + sim.metrics.upgrades - before
        return wrapped

    moves.resize, moves.upgrade = counted(resize), counted(upgrade)
    sim.run()
    assert sum(moved.values()) > 0 and max(moved.values()) == 1
