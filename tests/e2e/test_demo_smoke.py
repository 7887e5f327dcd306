"""README's main command keeps working: the demo starts everything, runs jobs, moves the job whose GPU it
breaks (a fatal XID, about a third of the way in), and serves the console."""

from __future__ import annotations

import json
import subprocess
import sys


def test_demo_smoke_runs_jobs_and_serves_the_console(tmp_path: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "heterojob", "demo", "--smoke", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == {"jobs_submitted", "jobs_running", "jobs_with_utilization", "migrations", "console_status",
                           "telemetry_degraded", "members"}
    # three member clusters by default, each running its site's job (pods listed in the member itself)
    assert len(result["members"]) >= 3, result
    assert all(m["jobs_placed"] >= 1 and m["pods_running"] >= 1 for m in result["members"].values()), result
    assert result["jobs_submitted"] >= 3
    assert result["jobs_running"] >= 3
    assert result["migrations"] >= 1, proc.stderr[-2000:]
    assert result["console_status"] == 200
    assert "injected fatal-xid on" in proc.stderr
    # the realistic exporter mix with pod churn: no "N duplicate series", no unresolved host labels
    assert not [m for m in result["telemetry_degraded"] if "duplicate" in m or "name no Node" in m], result


def test_inject_without_a_running_demo_says_what_to_do(tmp_path: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "heterojob", "demo", "inject", "fatal-xid", "n1",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "no running demo found" in proc.stderr and "heterojob demo" in proc.stderr


def test_inject_with_a_stale_state_file_says_the_demo_stopped(tmp_path: object) -> None:
    from pathlib import Path

    state = Path(str(tmp_path)) / "demo.json"
    state.write_text(json.dumps({"exporters": "http://127.0.0.1:9", "kubeconfig": str(Path(str(tmp_path)) / "kc")}))
    proc = subprocess.run([sys.executable, "-m", "heterojob", "demo", "inject", "fatal-xid", "n1",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "no demo is answering at http://127.0.0.1:9" in proc.stderr
    assert "urlopen" not in proc.stderr and "Traceback" not in proc.stderr


def test_background_demo_injects_without_a_node_and_stops_on_sigint(tmp_path: object) -> None:
    """As from a non-interactive shell's `heterojob demo &`: SIGINT starts ignored, and must still stop it."""
    import os
    import signal
    import time
    from pathlib import Path

    log = open(Path(str(tmp_path)) / "out.log", "w+")  # noqa: SIM115 - read below
    proc = subprocess.Popen([sys.executable, "-m", "heterojob", "demo", "--workdir", str(tmp_path), "--port", "0"],
                            stdout=log, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 120
        while "ready." not in Path(log.name).read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, Path(log.name).read_text()[-2000:]
            time.sleep(1)
        hit = None
        while hit is None and time.monotonic() < deadline:  # until a job holds a GPU
            out = subprocess.run([sys.executable, "-m", "heterojob", "demo", "inject", "fatal-xid",
                                  "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=120)
            if out.returncode == 0:
                hit = out.stdout
            else:
                assert "no running job holds" in out.stderr, out.stderr
                time.sleep(2)
        assert hit is not None and "it is under job team-" in hit and "injected fatal-xid on" in hit, hit
        assert "runs again on" in hit or "is still" in hit  # and what happened next
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 0
    assert not (Path(str(tmp_path)) / "demo.json").exists()
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert [p for p in leftovers if int(p) != os.getpid()] == []
