"""heterojob's training SDK (standard library only): `Checkpointer` answers the operator's checkpoint requests
and tells where to resume from, and serves the training step as a Prometheus metric (metrics.py). See
checkpointer.py, docs/operations.md and docs/telemetry.md ("Training steps")."""

from heterojob_sdk.checkpointer import Backoff, Checkpointer, read_annotations
from heterojob_sdk.metrics import METRICS_PORT_ENV, METRICS_PORT_NAME, StepMetrics
from heterojob_sdk.podapi import ApiError, PodAPI, PodClient
from heterojob_sdk.protocol import (ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_SAVE_TIME, ANNOTATION_CHECKPOINT_REQUEST, CHECKPOINT_SIZE_MAX,
                                    EVICTED_BY_EVICTION_API, EXIT_SIGTERM)

__version__ = "0.1.0"
__all__ = ["ANNOTATION_CHECKPOINT_ACK", "ANNOTATION_CHECKPOINT_SAVE_TIME", "ANNOTATION_CHECKPOINT_REQUEST", "CHECKPOINT_SIZE_MAX", "EVICTED_BY_EVICTION_API",
           "EXIT_SIGTERM", "METRICS_PORT_ENV", "METRICS_PORT_NAME", "ApiError", "Backoff", "Checkpointer", "PodAPI",
           "PodClient", "StepMetrics", "read_annotations"]
