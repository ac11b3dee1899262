"""The demo's last lines on the terminal: the URL, the logins, where the logs are, how to scrape, how to stop."""

from __future__ import annotations

import os
from pathlib import Path

from labs.management.commands.run_demo import demo_summary


def test_the_summary_names_the_url_the_logins_the_logs_and_how_to_stop(tmp_path: Path) -> None:
    summary = demo_summary(host="127.0.0.1", port=8123, log_dir=tmp_path / "log", metrics_token_file=tmp_path / "metrics_token")

    assert "NPU Lab Portal is running at http://127.0.0.1:8123/" in summary
    for login in ("student001 … student128", "instructor", "admin"):
        assert login in summary
    assert summary.count("npu-lab-demo") == 3
    assert f"{tmp_path / 'log'}/<name>.log" in summary
    assert f"kill -INT {os.getpid()}" in summary


def test_an_ipv6_host_is_bracketed_in_the_url(tmp_path: Path) -> None:
    summary = demo_summary(host="::1", port=8123, log_dir=tmp_path / "log", metrics_token_file=tmp_path / "metrics_token")

    assert "http://[::1]:8123/" in summary
    assert "http://[::1]:8123/metrics" in summary


def test_the_summary_says_how_to_scrape_the_metrics_with_the_token_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "var").mkdir()

    summary = demo_summary(
        host="127.0.0.1", port=8000, log_dir=tmp_path / "var" / "log", metrics_token_file=tmp_path / "var" / "metrics_token"
    )

    assert 'curl -H "Authorization: Bearer $(cat var/metrics_token)" http://127.0.0.1:8000/metrics' in summary


def test_with_a_token_from_the_environment_the_summary_points_at_it(tmp_path: Path) -> None:
    summary = demo_summary(host="127.0.0.1", port=8000, log_dir=tmp_path / "log", metrics_token_file=None)

    assert 'curl -H "Authorization: Bearer $METRICS_TOKEN" http://127.0.0.1:8000/metrics' in summary
