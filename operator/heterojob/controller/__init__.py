"""The operator's actuation, one step of the pipeline per module (see docs/architecture.md):

queue (work queue, backoff, timers, resync) -> reconcile (one pass per job, `Controller`) -> admission
(applies the planner's plan) / pods / checkpoints / moves (migrate, resize, periodic) ; quotas
(HeteroQuota status), alerts (alert symptoms), monitor (telemetry cycle), status (the one builder of a
HeteroJob's status patch), decisionlog (one line per decision).
"""

from heterojob.controller.reconcile import Controller, ControllerConfig
from heterojob.state.views import FleetSource

__all__ = ["Controller", "ControllerConfig", "FleetSource"]
