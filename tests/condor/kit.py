"""Helpers for the HTCondor tests: sample ads, the hook runner, a coordinator that records what it is sent."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import classad2

from htda.node.auth import Verifier
from htda.node.rest import RestApp, RestServer, Route
from htda.testing.nodes import SECRET, free_port

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / "hooks"
DATA = Path(__file__).parent / "data"
ROUTE = '[ Name = "HTDA"; EditJobInPlace = true; Requirements = JobUniverse == 5 && HTDA_Routed =!= true ]'
PREFIXES = [{"prefix": "/storage/", "lfn": "/"}, {"prefix": "root://xrootd.example.org//", "lfn": "/"}]
INPUTS = {"/store/data/run1/a.root": 100, "/store/data/run1/b.root": 100, "/store/data/run1/c.root": 200}


def job_ad(**changes: str) -> str:
    """The sample job ad (old format, sorted, as the schedd writes it) with ``changes`` applied."""
    lines = (DATA / "job.ad").read_text().splitlines()
    out = [line for line in lines if line.split(" = ", 1)[0] not in changes]
    out += [f"{name} = {value}" for name, value in changes.items() if value is not None]
    return "\n".join(sorted(out)) + "\n"


def hook_input(ad: str, route: str = ROUTE) -> bytes:
    """Standard input of the translate hook: the route ad, a ``------`` line, the job ad."""
    return f"{route}\n------\n{ad}".encode()


def parse(text: bytes | str) -> classad2.ClassAd:
    return classad2.parseOne(text.decode() if isinstance(text, bytes) else text, classad2.ParserType.Old)


@dataclass
class HookRun:
    code: int
    stdout: bytes
    stderr: bytes
    seconds: float


def run_hook(name: str, stdin: bytes, config: Path, direct: bool = False, binary: Path | None = None) -> HookRun:
    """Run ``hooks/<name>`` as HTCondor would; ``direct`` uses its shebang, else the same
    interpreter flags (-I -S) with this interpreter; ``binary`` runs that file instead (native hooks)."""
    if binary is not None:
        argv = [str(binary)]
    else:
        argv = [str(HOOKS / name)] if direct else [sys.executable, "-IS", str(HOOKS / name)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HTDA_HOOKS_CONFIG": str(config)}
    started = time.monotonic()
    proc = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=30)
    return HookRun(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)


def write_hook_config(path: Path, node: str, timeout: float = 0.5, **extra) -> Path:
    lines = [f'node = "{node}"', f"timeout = {timeout}"]
    lines += [f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class RecordingCoordinator:
    """A real server with the coordinator's jobs/events endpoints that keeps what it is sent."""

    def __init__(self) -> None:
        self.jobs: list[dict] = []
        self.events: list[dict] = []
        self.lock = threading.Lock()
        app = RestApp(Verifier(SECRET.encode()), read_networks=[])
        app.add([Route("POST", "/api/v1/coordinator/jobs", self._jobs, "jobs"),
                 Route("POST", "/api/v1/coordinator/events", self._events, "events")])
        self.server = RestServer(app, "127.0.0.1", free_port(), threads=4)
        self.url = f"http://127.0.0.1:{self.server.port}"

    def _jobs(self, request):
        with self.lock:
            self.jobs.extend(request.json["jobs"])
        return {"accepted": len(request.json["jobs"]), "duplicates": 0}

    def _events(self, request):
        with self.lock:
            self.events.extend(request.json["events"])
        return {"accepted": len(request.json["events"]), "duplicates": 0, "unknown": 0}


def agent_sections(locators: list[str], coordinators: list[str], **extra) -> dict:
    return {"submit": {"locators": locators, "coordinators": coordinators, "send_interval": 0.05,
                       "lfn_prefixes": PREFIXES, **extra}}


class StubbornServer:
    """A real HTTP server on loopback that answers every request late, or with fixed bytes."""

    def __init__(self, delay: float = 0.0, status: int = 200, body: bytes = b"",
                 content_type: str = "application/json"):
        import http.server

        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                if outer.delay:
                    outer.released.wait(outer.delay)
                try:
                    self.send_response(outer.status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(outer.body)))
                    self.end_headers()
                    self.wfile.write(outer.body)
                except OSError:
                    pass  # the client gave up first: that is the point

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.delay, self.status, self.body = delay, status, body
        self.released = threading.Event()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "StubbornServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()
