"""A fake OpenAI-compatible model server (as vLLM serves one) for the gateway's tests and bench:
no model, but the protocol: ``/v1/chat/completions`` and ``/v1/completions`` answer ``tokens``
words, streamed as Server-Sent Events ``delay`` seconds apart when the request says ``stream``
(a last ``usage`` event when it asks for ``stream_options.include_usage``), else one JSON with
``usage``; ``/v1/models`` lists ``model``. HTTP/1.1 with keep-alive, on asyncio, in a thread of its
own so synchronous tests can use it too.

    with FakeOpenAI(tokens=5, delay=0.2) as upstream:
        upstream.url  # http://127.0.0.1:<free port>/v1
        upstream.requests  # the JSON bodies it was sent, and their headers
"""

from __future__ import annotations

import asyncio
import json
import threading
import time


class FakeOpenAI:
    def __init__(self, *, tokens: int = 5, delay: float = 0.0, model: str = "fake-model") -> None:
        self.tokens = tokens
        self.delay = delay
        self.model = model
        self.requests: list[tuple[dict, dict]] = []  # (body, headers) of each completion request
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="fake-openai")
        self._server: asyncio.base_events.Server | None = None

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._connection, "127.0.0.1", 0), self._loop
        ).result(10)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    def __exit__(self, *exc) -> None:
        async def close() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _version = request_line.split(" ", 2)
                headers = {}
                for line in header_lines:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                await self._respond(writer, method, path, headers, body)
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _respond(self, writer, method: str, path: str, headers: dict, body: bytes) -> None:
        if path.rstrip("/") == "/v1/models":
            document = {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "fake"}]}
            return await self._json(writer, 200, document)
        if method != "POST" or path.rstrip("/") not in ("/v1/chat/completions", "/v1/completions"):
            return await self._json(writer, 404, {"error": {"message": "not found", "type": "not_found", "code": 404}})
        request = json.loads(body or b"{}")
        self.requests.append((request, headers))
        prompt_tokens = len(json.dumps(request.get("messages") or request.get("prompt") or "").split())
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": self.tokens, "total_tokens": prompt_tokens + self.tokens}
        chat = path.rstrip("/").endswith("chat/completions")
        created = int(time.time())
        if not request.get("stream"):
            text = " ".join(f"word{i}" for i in range(self.tokens))
            choice = {"index": 0, "finish_reason": "stop"}
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            document = {
                "id": "cmpl-fake",
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": self.model,
                "choices": [choice],
                "usage": usage,
            }
            return await self._json(writer, 200, document)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        kind = "chat.completion.chunk" if chat else "text_completion"
        for i in range(self.tokens):
            choice = {"index": 0, "finish_reason": "stop" if i == self.tokens - 1 else None}
            choice.update({"delta": {"content": f"word{i} "}} if chat else {"text": f"word{i} "})
            await self._event(
                writer, {"id": "cmpl-fake", "object": kind, "created": created, "model": self.model, "choices": [choice]}
            )
            if self.delay:
                await asyncio.sleep(self.delay)
        if (request.get("stream_options") or {}).get("include_usage"):
            await self._event(
                writer,
                {"id": "cmpl-fake", "object": kind, "created": created, "model": self.model, "choices": [], "usage": usage},
            )
        await self._chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _event(self, writer, event: dict) -> None:
        await self._chunk(writer, b"data: " + json.dumps(event).encode() + b"\n\n")

    @staticmethod
    async def _chunk(writer, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()

    @staticmethod
    async def _json(writer, status: int, document: dict) -> None:
        data = json.dumps(document).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n".encode() + data
        )
        await writer.drain()


def main() -> None:
    """``python -m labs.devcluster.fake_openai --port P [--tokens N] [--delay S]``: serve until killed."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    fake = FakeOpenAI(tokens=args.tokens, delay=args.delay)

    async def serve() -> None:
        server = await asyncio.start_server(fake._connection, "127.0.0.1", args.port)
        print(f"fake OpenAI server on http://127.0.0.1:{args.port}/v1", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
