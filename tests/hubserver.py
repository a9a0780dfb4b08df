"""A small HTTP server speaking the Hugging Face hub's resolve protocol, for download tests.

Serves `GET/HEAD /{owner}/{repo}/resolve/{revision}/{filename}` from an in-memory dict, honours
Range, and can refuse (401), break a transfer half way once, or serve the wrong bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_PATH = re.compile(r"^/(?:datasets/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")  # models and datasets
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/?]+)")


@dataclass
class HubState:
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # repo -> filename -> content
    gated: set[str] = field(default_factory=set)
    truncate_once: set[str] = field(default_factory=set)  # filenames whose first GET stops half way
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range)

    def gets(self, filename: str) -> list[str | None]:
        """The Range headers of the GETs for `filename` (None: a full GET)."""
        return [rng for method, path, rng in self.requests if method == "GET" and path.endswith("/" + filename)]


class _Handler(BaseHTTPRequestHandler):
    state: HubState
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        st = self.state
        st.requests.append((self.command, self.path, self.headers.get("Range")))
        if (tree := _TREE.match(self.path)) and tree["repo"] in st.files:
            return self._tree(st.files[tree["repo"]], body)
        m = _PATH.match(self.path.split("?")[0])
        if not m:
            return self._reply(404, {"X-Error-Code": "RepoNotFound"})
        repo, name = m["repo"], m["file"]
        if repo in st.gated:
            return self._reply(401, {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to this repo is restricted"})
        if repo not in st.files:
            return self._reply(404, {"X-Error-Code": "RepoNotFound"})
        if name not in st.files[repo]:
            return self._reply(404, {"X-Error-Code": "EntryNotFound"})
        data = st.files[repo][name]
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                   "Accept-Ranges": "bytes"}
        start = 0
        rng = self.headers.get("Range")
        if body and rng and (mr := re.match(r"bytes=(\d+)-", rng)):
            start = int(mr[1])
        payload = data[start:]
        status = 206 if start else 200
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        headers["Content-Length"] = str(len(payload))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not body:
            return
        if name in st.truncate_once and not start:
            st.truncate_once.discard(name)
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(payload)

    def _tree(self, files: dict[str, bytes], body: bool) -> None:
        """The repository's file list, as /api/models/{repo}/tree/{revision} gives it."""
        listing = [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                   for name, data in files.items()]
        payload = json.dumps(listing).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def _reply(self, status: int, headers: dict) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()


class HubServer:
    def __init__(self):
        self.state = HubState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
