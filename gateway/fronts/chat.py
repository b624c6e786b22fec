"""Chat-completions front: the pipeline's chunks as ``chat.completion.chunk`` SSE.

Wire shape (what Open WebUI and openai-python both accept): one-line JSON ``data``,
LF endings, keep-alives as bare ``:`` comment lines, a final chunk with
``finish_reason``, then ``data: [DONE]``. The *terminal* chunk (the last JSON
chunk before ``[DONE]``) carries the artifact manifest under ``"gateway"``; to know
which chunk is last, chunks from the first one with a ``finish_reason`` onward are
held until the stream ends (they are the tail of the stream, so nothing ordinary is
delayed). On failure: a final chunk with ``finish_reason: "error"`` and an
``error`` object, then ``[DONE]``.
"""

from __future__ import annotations

from typing import Any

from gateway.pipeline import ChatPipeline, Named, Out
from gateway.sse import DONE, encode_comment, encode_json


def _has_finish(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and c.get("finish_reason") is not None for c in choices
    )


def error_object(code: str, message: str) -> dict[str, Any]:
    return {"message": message, "type": code, "code": code}


class ChatSink:
    """Encodes one chat-completions stream."""

    def __init__(self) -> None:
        self._tail: list[Out] = []
        self._saw_finish = False

    def start(self) -> bytes:
        return b""

    def _encode(self, out: Out) -> bytes:
        if isinstance(out, Named):
            data = out.data
            if not isinstance(data, dict):
                data = {"data": data}
            if "choices" not in data:
                # keeps SDK iterators that read chunk.choices from breaking
                data = {**data, "choices": []}
            return encode_json(data, event=out.event)
        return encode_json(out)

    def batch(self, outs: list[Out]) -> bytes:
        parts: list[bytes] = []
        for out in outs:
            if self._tail or (isinstance(out, dict) and _has_finish(out)):
                self._tail.append(out)
            else:
                parts.append(self._encode(out))
        return b"".join(parts)

    def keepalive(self) -> bytes:
        return encode_comment()

    def _terminal(self, chunks: list[Out], pipeline: ChatPipeline) -> list[Out]:
        tail = self._tail + chunks
        self._tail = []
        json_chunks = [c for c in tail if isinstance(c, dict)]
        if not any(_has_finish(c) for c in json_chunks):
            last = pipeline.make_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])
            tail.append(last)
            json_chunks.append(last)
        json_chunks[-1]["gateway"] = pipeline.resolver.manifest()
        return tail

    async def end(self, pipeline: ChatPipeline) -> bytes:
        chunks: list[Out] = list(await pipeline.finish())
        if chunks and not any(_has_finish(c) for c in self._tail if isinstance(c, dict)):
            for choice in chunks[-1]["choices"]:  # type: ignore[index]
                choice["finish_reason"] = "stop"
        tail = self._terminal(chunks, pipeline)
        return b"".join(self._encode(c) for c in tail) + DONE

    async def fail(self, pipeline: ChatPipeline, code: str, message: str) -> bytes:
        flushed = await pipeline.finish(failed=True)
        parts = [self._encode(c) for c in self._tail]
        self._tail = []
        deltas: dict[int, dict[str, Any]] = {0: {}}
        for chunk in flushed:
            for choice in chunk["choices"]:
                deltas[choice.get("index", 0)] = choice["delta"]
        final = pipeline.make_chunk(
            [{"index": i, "delta": d, "finish_reason": "error"} for i, d in sorted(deltas.items())]
        )
        final["error"] = error_object(code, message)
        final["gateway"] = pipeline.resolver.manifest()
        parts.append(encode_json(final))
        return b"".join(parts) + DONE
