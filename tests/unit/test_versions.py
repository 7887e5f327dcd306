"""Version requirements (engine.basics.versions): PEP 440 plus Huawei CANN's release-candidate scheme.

CANN's published releases (Ascend community download pages, 2024): 7.0.RC1, 7.0.0, 8.0.RC1, 8.0.RC2,
8.0.RC3, 8.0.0, 8.1.RC1; internal builds carry `.alphaNNN` / `.betaN` after the RC."""

from __future__ import annotations

import pytest

from heterojob.engine.basics.versions import RequirementError, check, parse_requirement, parse_version
from heterojob.engine.capacity.fleet import DeviceClass
from heterojob.engine.placing.placement import software_mismatch


def test_cann_versions_order_release_candidates_before_the_release() -> None:
    published = ["7.0.RC1", "7.0.0", "8.0.RC1", "8.0.RC2.alpha003", "8.0.RC2", "8.0.RC3", "8.0.0", "8.0.1",
                 "8.1.RC1"]
    assert sorted(reversed(published), key=parse_version) == published


@pytest.mark.parametrize(("have", "wanted", "ok"), [
    ("8.0.RC3", ">=8.0.RC1", True),
    ("8.0.RC3", ">=8.0.RC3, <8.1", True),
    ("8.0.RC3", ">=8.0", False),  # an RC precedes its release
    ("8.0.0", ">=8.0.RC3", True),
    ("8.1.RC1", "<8.1", False),
    ("8.1.RC1", ">=8.0.0", True),
    ("8.0.RC3", "8.0.RC3", True),  # a bare version means exactly it
    ("8.0.RC3", "==8.0.*", True),
    ("12.4", ">=12.1", True),
    ("24.1.rc2", ">=24.1.rc1", True),  # Ascend driver numbering is PEP 440 already
])
def test_requirements_users_write(have: str, wanted: str, ok: bool) -> None:
    assert (check("cann", have, wanted) is None) == ok


def test_a_mismatch_says_what_would_match() -> None:
    msg = str(check("cann", "8.0.RC3", ">=8.0"))
    assert "release candidate" in msg and "'>=8.0.RC3' would match" in msg
    assert "'>=12.2' would match" in str(check("cuda", "12.2", ">=12.4"))
    assert "'<=9.0.0' would match" in str(check("cann", "9.0.0", "<8.1"))
    assert str(check("cann", None, ">=8")) == "needs cann >=8, the class declares no cann version"


@pytest.mark.parametrize("bad", ["banana", "", ">=", ">=twelve", "12.4, nonsense"])
def test_what_is_not_a_requirement_is_refused_with_examples(bad: str) -> None:
    with pytest.raises(RequirementError, match="e.g. '>=12.1'"):
        parse_requirement(bad)


def test_placement_filter_uses_the_cann_scheme() -> None:
    npu = DeviceClass("ascend-910b", "huawei.com/Ascend910", {"npu": "910b"}, 0.6, {"cann": "8.0.RC3"})
    assert software_mismatch(npu, {"cann": ">=8.0.RC1"}) is None
    assert "'>=8.0.RC3' would match" in (software_mismatch(npu, {"cann": ">=8.0"}) or "")
