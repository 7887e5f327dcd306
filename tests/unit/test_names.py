"""A class name says what the class is, once: the names found twice across operator/heterojob (the engine's
`Admission` and `Disruption` plans, the controller's disruption step) name one class each."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# engine/running.py's types were named as lifecycle's Decision, migration's Rules, preemption's RunningJob and the
# API's Checkpoint: each now says what it is, once
ONCE = ("Admission", "Disruption", "Moves", "Decision", "Rules", "RunningJob", "Checkpoint", "RunningDecision",
        "RunningRules", "RunningState", "CheckpointInProgress")


def test_each_of_these_names_one_class() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "operator" / "heterojob").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name in ONCE:
                where[node.name].append(path.relative_to(ROOT).as_posix())
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
    assert where["Moves"] == ["operator/heterojob/controller/moves.py"]  # the controller's disruption step
