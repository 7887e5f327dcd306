"""The demo across member clusters (docs/multicluster.md): three or more members, each its own API emulator;
what the demo prints per member works: the real kubectl (as tests/harness/test_kubectl_conformance.py
uses it) against the member's kubeconfig lists the pods of a job placed there, and the manager has none of
them. One cluster stays selectable (`--members none`)."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from heterojob.sim.demo.fleet import DEFAULT_MEMBERS, parse_members


def kubectl(*args: str) -> str:
    return subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=60, check=True).stdout


def test_the_demo_runs_members_and_kubectl_against_a_member_lists_the_jobs_pods(tmp_path: Path) -> None:
    log = open(tmp_path / "out.log", "w+")  # noqa: SIM115 - read below
    proc = subprocess.Popen([sys.executable, "-m", "heterojob", "demo", "--workdir", str(tmp_path), "--port", "0"],
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 150
        while "ready." not in (tmp_path / "out.log").read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "out.log").read_text()[-2000:]
            time.sleep(1)
        out = (tmp_path / "out.log").read_text()
        state: dict[str, Any] = json.loads((tmp_path / "demo.json").read_text())
        members = state["members"]
        assert list(members) == list(DEFAULT_MEMBERS) and len(members) >= 3
        assert len({m["kubeconfig"] for m in members.values()} | {state["kubeconfig"]}) == len(members) + 1
        manager = state["kubeconfig"]
        for region, member in members.items():
            # the line the demo printed for this member, run as printed
            line = next(x for x in out.splitlines() if x.strip().startswith(f"{region}: kubectl"))
            command = shlex.split(re.search(r"(kubectl --kubeconfig \S+ get pods -A)", line).group(1))
            job = f"showcase-{region}"

            def placed(job: str = job) -> dict[str, Any]:
                return json.loads(kubectl("--kubeconfig", manager, "get", "hj", "-n", "team-c", job, "-o", "json"))

            def listed(command: list[str] = command, job: str = job) -> list[str]:
                return [x for x in subprocess.run(command, capture_output=True, text=True, timeout=60,
                                                  check=True).stdout.splitlines() if job in x]

            while time.monotonic() < deadline and not (listed() and (placed().get("status") or {}).get("phase")
                                                       == "Running"):
                time.sleep(1)
            status = placed()["status"]
            assert status["placement"]["cluster"] == region and status["phase"] == "Running", status
            rows = listed()
            assert rows and all(r.split()[0] == "team-c" and "Running" in r for r in rows), rows
            assert not kubectl("--kubeconfig", manager, "get", "pods", "-n", "team-c", "-l",
                               f"heterojob.io/job={job}", "-o", "name").strip()  # never in the manager too
            region_obj = json.loads(kubectl("--kubeconfig", manager, "get", "region", region, "-o", "json"))
            reachable = {c["type"]: c for c in region_obj["status"]["conditions"]}["MemberReachable"]
            assert reachable["status"] == "True", reachable
            assert "token" not in json.dumps(region_obj)  # the Region names the Secret, never its content
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 0
    for member in members.values():  # every member's emulator stopped with the demo
        pid = int((Path(member["kubeconfig"]).parent / "pid").read_text())
        assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


def test_members_are_chosen_among_the_demo_regions_or_none() -> None:
    assert parse_members(None) == DEFAULT_MEMBERS and parse_members("none") == ()
    assert parse_members("cn-wuhu, cn-chengdu,cn-wuhu") == ("cn-wuhu", "cn-chengdu")
    with pytest.raises(ValueError, match="cn-mars not a demo region; choose among cn-north"):
        parse_members("cn-wuhu,cn-mars")
