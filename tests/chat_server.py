"""A real HTTP server on loopback speaking the OpenAI chat-completions protocol, with scripted
replies: the ``openai`` client talks real HTTP to it (nothing of the client is mocked)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DENSE = ROOT / "src" / "infrarsi" / "reference" / "dense-1node"
CHEATS = ROOT / "tests" / "fixtures" / "adversarial"


def fenced(diff: str, expectation: dict | None = None) -> str:
    """A reply as the prompt asks for it: one diff block and one expectation block."""
    out = f"Here is the patch.\n\n```diff\n{diff}```\n"
    if expectation is not None:
        out += f"\n```json\n{json.dumps(expectation)}\n```\n"
    return out


def catalog_diff(name: str) -> str:
    return (DENSE / "patches" / f"{name}.diff").read_text()


def cheat_diff(name: str) -> str:
    return (CHEATS / f"{name}.diff").read_text()


def broken_diff() -> str:
    """A diff that applies to dense-1node's model.py but leaves it unable to compile."""
    lines = (DENSE / "model.py").read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("import"))
    return (
        f"--- a/model.py\n+++ b/model.py\n@@ -{i + 1},2 +{i + 1},3 @@\n {lines[i]}\n"
        f"+def broken(:\n {lines[i + 1]}\n"
    )


class ChatServer:
    """Answers each chat request with the next scripted reply (then with ``then``); keeps
    every request body. ``status`` answers every request with that HTTP status instead."""

    def __init__(
        self,
        replies: list[str],
        then: str = "I have nothing more to propose.",
        status: int = 200,
        model: str = "scripted-model",
    ):
        self.replies, self.then, self.status = list(replies), then, status
        self.model = model
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                if server.status != 200:
                    data = json.dumps({"error": {"message": "refused", "type": "auth"}}).encode()
                    self._send(server.status, data)
                    return
                text = server.replies.pop(0) if server.replies else server.then
                self._send(200, json.dumps(_completion(text)).encode())

            def _send(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def env(self) -> dict[str, str]:
        return {
            "INFRARSI_LLM_BASE_URL": f"http://127.0.0.1:{self.httpd.server_port}/v1",
            "INFRARSI_LLM_MODEL": self.model,
        }

    def prompt(self, i: int) -> str:
        """The user message of the i-th request."""
        return next(m["content"] for m in self.requests[i]["messages"] if m["role"] == "user")

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(content: str) -> dict:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
            }
        ],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
    }
