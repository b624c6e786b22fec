"""``python -m harness.bench.bytecodes OUT gateway-args...``: ``gateway.cli`` with a
count of the bytecodes each function runs, between SIGUSR1 and SIGUSR2.

A figure the machine's noise does not move (as callgrind's instructions, but per
Python function): SIGUSR1 starts counting (``sys.settrace`` with opcode events, in the
trio thread only: the worker threads' work is not counted), SIGUSR2 stops and writes
``OUT`` (JSON: ``[[bytecodes, calls, "file:line function"], ...]``; a coroutine's every
resumption counts as a call). Tracing slows the gateway ~30× and C functions count as
the one bytecode that calls them. Used by ``python -m harness.bench profile --requests
--bytecodes``.
"""

from __future__ import annotations

import collections
import json
import signal
import sys
from types import CodeType, FrameType
from typing import Any

_ops: collections.Counter[CodeType] = collections.Counter()
_calls: collections.Counter[CodeType] = collections.Counter()


def _local(frame: FrameType, event: str, arg: Any) -> Any:
    if event == "opcode":
        _ops[frame.f_code] += 1
    return _local


def _global(frame: FrameType, event: str, arg: Any) -> Any:
    if event != "call":
        return None
    frame.f_trace_opcodes = True
    _calls[frame.f_code] += 1
    return _local


def _name(code: CodeType) -> str:
    where = code.co_filename.split("site-packages/")[-1]
    for root in sys.path:
        if root and where.startswith(root.rstrip("/") + "/"):
            where = where[len(root.rstrip("/")) + 1 :]
            break
    return f"{where}:{code.co_firstlineno} {code.co_qualname}"


def main() -> int:
    out, args = sys.argv[1], sys.argv[2:]
    from gateway.cli import main as gateway_main

    def begin(*_: object) -> None:
        _ops.clear()
        _calls.clear()
        sys.settrace(_global)

    def end(*_: object) -> None:
        sys.settrace(None)
        rows = [[n, _calls[code], _name(code)] for code, n in _ops.items()]
        with open(out, "w", encoding="utf-8") as f:
            json.dump(rows, f)

    signal.signal(signal.SIGUSR1, begin)
    signal.signal(signal.SIGUSR2, end)
    return gateway_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
