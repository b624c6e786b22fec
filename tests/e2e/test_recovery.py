"""The health-recovery scenario with real processes (gateway run, gateway proxy, demo upstream)."""

from __future__ import annotations

import subprocess
import sys


def test_health_recovery_scenario() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "health-recovery", "--interval", "1", "--tries", "30"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for step in (
        "gateway after SIGKILL + restart",
        "proxy after SIGKILL + restart",
        "SIGTERM with a stream in flight",
        "gateway after SIGTERM + restart",
        "proxy sees the restarted gateway",
    ):
        line = next(ln for ln in out.splitlines() if step in ln)
        assert line.startswith("ok"), line
    assert "terminal error gateway_draining; [DONE] yes" in out
