"""The checkpoint protocol's names, as the operator writes and reads them (heterojob.constants holds the same
values; tests/unit/test_sdk_package.py checks they agree)."""

from __future__ import annotations

import signal

ANNOTATION_CHECKPOINT_REQUEST = "heterojob.io/checkpoint-request"  # on the pod: the id the operator asks for
ANNOTATION_CHECKPOINT_ACK = "heterojob.io/checkpoint-ack"  # written by the rank: "<id>;<step>;<uri>[;size=<bytes>]"
# written with the ack: "<id>;start=<unix s>;end=<unix s>", when the rank began and finished saving (its clock)
ANNOTATION_CHECKPOINT_SAVE_TIME = "heterojob.io/checkpoint-save-time"
CHECKPOINT_SIZE_MAX = 1 << 62  # bytes (4 EiB): a larger size is not believed, and left out of the ack
EVICTED_BY_EVICTION_API = "EvictionByEvictionAPI"  # DisruptionTarget's reason on a pod a drain evicts
EXIT_SIGTERM = 128 + signal.SIGTERM  # what a process killed by SIGTERM reports
