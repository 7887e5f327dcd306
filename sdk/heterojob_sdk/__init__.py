"""heterojob's training SDK (standard library only): `Checkpointer` answers the operator's checkpoint requests
and tells where to resume from. See checkpointer.py and docs/operations.md."""

from heterojob_sdk.checkpointer import Backoff, Checkpointer, read_annotations
from heterojob_sdk.podapi import ApiError, PodAPI, PodClient
from heterojob_sdk.protocol import (ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_SAVE_TIME, ANNOTATION_CHECKPOINT_REQUEST, CHECKPOINT_SIZE_MAX,
                                    EVICTED_BY_EVICTION_API, EXIT_SIGTERM)

__version__ = "0.1.0"
__all__ = ["ANNOTATION_CHECKPOINT_ACK", "ANNOTATION_CHECKPOINT_SAVE_TIME", "ANNOTATION_CHECKPOINT_REQUEST", "CHECKPOINT_SIZE_MAX", "EVICTED_BY_EVICTION_API",
           "EXIT_SIGTERM", "ApiError", "Backoff", "Checkpointer", "PodAPI", "PodClient", "read_annotations"]
