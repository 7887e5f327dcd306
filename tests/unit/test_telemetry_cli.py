"""`heterojob telemetry snapshot` without a reachable Prometheus or kubeconfig: a clear message and an exit code."""

from __future__ import annotations

import socket

import pytest

from heterojob.cli import main


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when we return: nothing listens there


def test_unreachable_prometheus_exits_non_zero_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    assert main(["telemetry", "snapshot", "--prometheus-url", url, "--timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert f"Prometheus at {url} could not be read" in err and "cannot reach Prometheus" in err
    assert "Traceback" not in err


def test_an_unusable_kubeconfig_exits_non_zero_with_a_message(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["telemetry", "snapshot", "--prometheus-url", "http://127.0.0.1:9", "--kubeconfig",
                 str(missing)]) == 3
    assert f"cannot read Nodes with --kubeconfig {missing}" in capsys.readouterr().err


def test_the_url_is_required(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL", raising=False)
    import importlib

    import heterojob.cli as cli

    importlib.reload(cli)
    with pytest.raises(SystemExit) as exc:
        cli.main(["telemetry", "snapshot"])
    assert exc.value.code == 2 and "--prometheus-url" in capsys.readouterr().err
