"""A detector that finds no path: the harness's proof that its leak checks can fail.

``python -m harness replay --no-rewrite`` builds the gateway with
``PipelineSettings(detector=NothingDetector())``; every planted path then reaches the
client raw and the replay must report leaks. Production code has no such switch.
"""

from __future__ import annotations

from gateway.core.paths import Clear, PathDetector, ScanResult
from gateway.stream.pipeline import PipelineSettings

__all__ = ["NOTHING_FOUND", "NothingDetector"]


class NothingDetector(PathDetector):
    def scan(self, buf: str, pos: int, final: bool, json_text: bool = False) -> ScanResult:
        return Clear(len(buf))


NOTHING_FOUND = PipelineSettings(detector=NothingDetector())
