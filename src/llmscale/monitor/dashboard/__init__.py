"""`llmscale dashboard RUN_DIR`: a local page over the run directory, served by the standard library's
ThreadingHTTPServer (no framework, no internet: the page's HTML, JS and CSS are package data written for it, and it
draws its charts as inline SVG). `GET /` the page, `GET /api/run` the JSON it polls every 2 s (api.py). The
prediction beside the measured breakdown is RUN_DIR/prediction.json, made in a background thread when missing
(predictor.py).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from llmscale.errors import LlmscaleError
from llmscale.monitor.dashboard.api import run_document
from llmscale.monitor.dashboard.predictor import Predictor

STATIC = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "text/javascript"),
          "/style.css": ("style.css", "text/css")}


def _handler(run_dir: Path, predictor: Predictor) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/api/run":
                try:
                    body, kind, code = json.dumps(run_document(run_dir, predictor), allow_nan=False).encode(), \
                        "application/json", 200
                except (LlmscaleError, ValueError) as exc:
                    body, kind, code = json.dumps({"error": str(exc)}).encode(), "application/json", 500
            elif path in STATIC:
                name, kind = STATIC[path]
                body, code = resources.files(__package__).joinpath("static").joinpath(name).read_bytes(), 200
            else:
                body, kind, code = b"not found", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: a page polling every 2 s would fill the terminal

    return Handler


@dataclass
class Dashboard:
    """A running dashboard: `.url`, `.close()`."""

    server: ThreadingHTTPServer
    thread: threading.Thread
    predictor: Predictor

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def close(self) -> None:
        self.predictor.close()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def start(run_dir: Path, port: int = 0, host: str = "127.0.0.1", predict: bool = True) -> Dashboard:
    """Serve the dashboard of `run_dir` in a daemon thread (port 0: a free one); `predict`: make the prediction
    in the background when RUN_DIR/prediction.json is missing (predictor.py)."""
    if not run_dir.is_dir():
        raise LlmscaleError(f"{run_dir}: not a run directory (no such directory)")
    try:
        predictor = Predictor(run_dir, enabled=predict)
        server = ThreadingHTTPServer((host, port), _handler(run_dir, predictor))
    except OSError as exc:
        raise LlmscaleError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror})") from None
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="llmscale-dashboard", daemon=True)
    thread.start()
    predictor.start()
    return Dashboard(server, thread, predictor)
