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
from urllib.parse import parse_qs

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_PATH = re.compile(r"^/(?:datasets/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")  # models and datasets
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/?]+)")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/?]+/[^/?]+?)(?:/revision/(?P<rev>[^/?]+))?/?(?:\?.*)?$")
_SEARCH = re.compile(r"^/api/models/?(?:\?(?P<query>.*))?$")


@dataclass
class HubState:
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # repo -> filename -> content
    gated: set[str] = field(default_factory=set)
    truncate_once: set[str] = field(default_factory=set)  # filenames whose first whole-file GET stops half way
    cut_then_down: set[str] = field(default_factory=set)  # filenames whose first whole-file GET stops half way, after
    # which the hub is down (`down`: every request answered 503) until the test brings it back
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range)
    sent: int = 0  # bytes of file content sent
    down: bool = False  # answer every request with 503, as an unreachable hub would fail

    def file_gets(self) -> list[tuple[str, str | None]]:
        """(path, Range) of every GET of a file (not of the API)."""
        return [(path, rng) for method, path, rng in self.requests if method == "GET" and "/resolve/" in path]

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
        if st.down:
            return self._reply(503, {})
        if (tree := _TREE.match(self.path)) and tree["repo"] in st.files:
            return self._tree(st.files[tree["repo"]], body)
        if (search := _SEARCH.match(self.path)) and "/resolve/" not in self.path:
            return self._json(self._search(parse_qs(search["query"] or "")), body)
        if (info := _INFO.match(self.path)) and "/resolve/" not in self.path:
            if info["repo"] not in st.files:
                return self._reply(404, {"X-Error-Code": "RepoNotFound"})
            return self._json(self._model(info["repo"]), body)
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
        start, end, bounded = 0, len(data) - 1, False
        rng = self.headers.get("Range")
        if body and rng and (mr := re.match(r"bytes=(\d+)-(\d*)", rng)):
            start, end, bounded = int(mr[1]), min(int(mr[2]) if mr[2] else end, end), bool(mr[2])
        payload = data[start:end + 1]
        status = 206 if start or bounded else 200
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        headers["Content-Length"] = str(len(payload))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not body:
            return
        st.sent += len(payload) if body else 0
        whole = not start and not bounded  # a download's first GET (not a header's range read)
        cut = name in st.cut_then_down and whole
        if cut or (name in st.truncate_once and whole):
            st.truncate_once.discard(name)
            st.cut_then_down.discard(name)
            st.down = st.down or cut
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(payload)

    def _tree(self, files: dict[str, bytes], body: bool) -> None:
        """The repository's file list, as /api/models/{repo}/tree/{revision} gives it."""
        listing = [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                   for name, data in files.items()]
        self._json(listing, body)

    def _model(self, repo: str) -> dict:
        """A model's entry as /api/models gives it with expand=siblings,sha (the `gguf` tag for GGUF repositories)."""
        names = list(self.state.files[repo])
        tags = ["gguf"] if any(n.endswith(".gguf") for n in names) else []
        return {"id": repo, "modelId": repo, "sha": COMMIT, "tags": tags, "siblings": [{"rfilename": n} for n in names]}

    def _search(self, query: dict) -> list[dict]:
        """HfApi.list_models: `search` (a substring of the id, any case), `author`, `filter` (tags), `limit`."""
        out = []
        for repo in self.state.files:
            entry = self._model(repo)
            if "search" in query and query["search"][0].lower() not in repo.lower():
                continue
            if "author" in query and repo.split("/")[0] != query["author"][0]:
                continue
            if any(tag not in entry["tags"] for tag in query.get("filter", [])):
                continue
            out.append(entry)
        return out[:int(query["limit"][0])] if "limit" in query else out

    def _json(self, data, body: bool) -> None:
        payload = json.dumps(data).encode()
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
        self.httpd.handle_error = lambda request, address: None  # a client that hangs up early is no error here
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
