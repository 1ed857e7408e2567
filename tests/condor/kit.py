"""Helpers for the HTCondor tests: sample ads, the hook runner, a coordinator that records what it is sent."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import classad2

from tests.users import User, run_as

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
        return run_argv([str(binary)], stdin, config)
    return run_argv([str(HOOKS / name)] if direct else Hooks().argv(name), stdin, config)


def run_argv(argv: list[str], stdin: bytes, config: Path, user: User | None = None) -> HookRun:
    """Run a hook's ``argv`` with ``stdin`` and the settings ``config``; as ``user`` when given (the
    job router runs hooks as the job's owner)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HTDA_HOOKS_CONFIG": str(config)}
    started = time.monotonic()
    if user is not None:
        proc = run_as(user, argv, input=stdin, env=env, text=False, timeout=30)
    else:
        proc = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=30)
    return HookRun(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)


@dataclass(frozen=True)
class Hooks:
    """Hook executables as HTCondor runs them: the checkout's scripts with this interpreter and
    ``-I -S`` (no ``directory``), or what ``install-hooks`` wrote into ``directory``."""

    directory: Path | None = None

    def argv(self, name: str) -> list[str]:
        if self.directory is not None:
            return [str(self.directory / name)]
        return [sys.executable, "-IS", str(HOOKS / name)]

    def __call__(self, name: str, stdin: bytes, config: Path, user: User | None = None) -> HookRun:
        return run_argv(self.argv(name), stdin, config, user)


def install_hooks(target: Path, native: bool = False) -> Path:
    """``hooks/install-hooks [--native] target``, as a site runs it; ``target``."""
    subprocess.run([sys.executable, str(HOOKS / "install-hooks"), *(["--native"] if native else []), str(target)],
                   check=True, capture_output=True)
    return target


def write_hook_config(path: Path, socket: str | None = None, timeout: float = 5.0, **extra) -> Path:
    """Hook settings (mode 0644) that reach the agent at ``socket``; ``extra`` keys as given.  The
    default ``timeout`` is generous so that a loaded CI machine does not turn a steering test into
    a fail-open one; the tests of the time limits pass their own."""
    lines = [f'socket = "{socket}"'] if socket else []
    lines.append(f"timeout = {timeout}")
    lines += [f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
    return path


def shared_dir(prefix: str) -> Path:
    """A fresh directory under /tmp, root's, mode 0755: every account may reach what is in it,
    only root may write it (as /run/htda and a hook directory are).  pytest's own is 0700."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    return path


def agent_socket(node) -> str:
    """The UNIX socket the submit agent of the in-process ``node`` serves the hooks on."""
    return str(node.components["submit"].channel.path)


def agent_sections(locators: list[str], coordinators: list[str], socket: str, **extra) -> dict:
    """An agent's settings; the locator lookup may take 3 s (not the default 0.25 s) so that a
    loaded machine does not make a test of steering see an unsteered job."""
    return {"submit": {"locators": locators, "coordinators": coordinators, "send_interval": 0.05,
                       "lfn_prefixes": PREFIXES, "socket": socket, "lookup_timeout": 3.0, **extra}}


class StubbornServer:
    """A real HTTP server that answers every request late, or with fixed bytes: on loopback
    (``.url``), or on the UNIX socket ``socket`` as an agent would be (run by root: a fake agent
    the hooks cannot tell from the real one)."""

    def __init__(self, delay: float = 0.0, status: int = 200, body: bytes = b"",
                 content_type: str = "application/json", socket: str | None = None):
        import http.server
        import socketserver

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

            def address_string(self) -> str:
                return "local"

        self.delay, self.status, self.body = delay, status, body
        self.released = threading.Event()
        if socket:
            self.socket = socket
            self.httpd = socketserver.ThreadingUnixStreamServer(socket, Handler)
            os.chmod(socket, 0o666)
        else:
            self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "StubbornServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()
