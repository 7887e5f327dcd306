"""Evaluation: a discrete-event trace replay that schedules through the operator's own planner."""
