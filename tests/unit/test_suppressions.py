"""Every silenced check says why: `# noqa: CODE - reason` and `# type: ignore[code]  # reason` (ruff and mypy
read the code; people read the reason)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)$")
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<rest>.*)$")
REASONED_NOQA = re.compile(r"^:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*\s+-+\s+\S")
REASONED_IGNORE = re.compile(r"^\[[a-z-]+(,\s*[a-z-]+)*\]\s+#\s*\S")
# engine/queue/policy.py: rewritten into the whole-queue scheduler, which gives its three reasons
NOT_YET = {"operator/heterojob/engine/queue/policy.py"}


def unexplained(text: str, ignores: bool = True) -> list[str]:
    """The lines whose `noqa` (and, with `ignores`, `type: ignore`) gives no reason."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if (m := NOQA.search(line)) and not REASONED_NOQA.match(m["rest"]):
            out.append(f"{n}: {line.strip()}")
        elif ignores and (m := IGNORE.search(line)) and not REASONED_IGNORE.match(m["rest"]):
            out.append(f"{n}: {line.strip()}")
    return out


def test_the_rule_reads_both_forms() -> None:
    assert unexplained("x = 1  # noqa: BLE001 - a bad cycle is logged") == []
    assert unexplained("x = 1  # type: ignore[arg-type]  # a stand-in") == []
    assert len(unexplained("x = 1  # noqa: E402\ny = 2  # type: ignore[index]\nz = 3  # type: ignore")) == 3


def test_every_noqa_and_type_ignore_says_why() -> None:
    """The code's `noqa` and `type: ignore`; the tests' and the benchmarks' `noqa` (mypy checks neither)."""
    found = {}
    for top in ("operator", "console", "tests", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in NOT_YET or rel == "tests/unit/test_suppressions.py":
                continue
            if lines := unexplained(path.read_text(), ignores=top not in ("tests", "bench")):
                found[rel] = lines
    assert not found, found
