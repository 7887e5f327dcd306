"""A class name says what the class is, once: no two classes under operator/heterojob or console share a name
(the engine's `Admission` and `Disruption` plans, the controller's disruption step, the verdicts of rooms,
migration, transfer and the emulator's filters, the replay's and the emulator's schedulers... each have their
own)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "operator" / "heterojob", ROOT / "console")
# engine/execution/running.py's types were named as lifecycle's Decision, migration's Rules, preemption's RunningJob and the
# API's Checkpoint: each now says what it is, once
ONCE = ("Admission", "Disruption", "Moves", "Decision", "Rules", "RunningJob", "Checkpoint", "RunningDecision",
        "RunningRules", "RunningState", "CheckpointInProgress")
# a name two classes may share, with the reason (none so far: a re-export is an import, not a second class)
SHARED: dict[str, str] = {}


def classes(roots: tuple[Path, ...] = PACKAGES) -> dict[str, list[str]]:
    """Every class defined under `roots` (nested ones too), by name: where each is (path:line)."""
    where: dict[str, list[str]] = defaultdict(list)
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    return where


def test_each_of_these_names_one_class() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "operator" / "heterojob").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name in ONCE:
                where[node.name].append(path.relative_to(ROOT).as_posix())
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
    assert where["Moves"] == ["operator/heterojob/controller/moves.py"]  # the controller's disruption step


def test_no_two_classes_share_a_name() -> None:
    found = classes()
    places = [w for ws in found.values() for w in ws]
    # the scan sees both packages, not an empty directory
    assert len(found) > 100 and {w.split("/")[0] for w in places} == {"operator", "console"}
    twice = {name: places for name, places in found.items() if len(places) > 1 and name not in SHARED}
    assert twice == {}, "class names defined more than once (rename each to say what it holds): " + "; ".join(
        f"{name} at {', '.join(places)}" for name, places in sorted(twice.items()))


def test_the_allowed_shared_names_are_still_shared() -> None:
    """An entry of SHARED that no longer names two classes is stale: remove it."""
    found = classes()
    assert {name for name in SHARED if len(found.get(name, [])) < 2} == set()
