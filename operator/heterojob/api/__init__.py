"""Typed specs of the four heterojob resources, their validation and their CRD schemas."""

from heterojob.api.accelerator import AcceleratorClass, AcceleratorClassSpec
from heterojob.api.common import SpecError, parse_spec
from heterojob.api.job import HeteroJob, HeteroJobSpec, Phase, Priority
from heterojob.api.job_status import HeteroJobStatus
from heterojob.api.quota import HeteroQuota, HeteroQuotaSpec
from heterojob.api.region import Region, RegionSpec

__all__ = [
    "AcceleratorClass", "AcceleratorClassSpec", "HeteroJob", "HeteroJobSpec", "HeteroJobStatus",
    "HeteroQuota", "HeteroQuotaSpec", "Phase", "Priority", "Region", "RegionSpec", "SpecError", "parse_spec",
]
