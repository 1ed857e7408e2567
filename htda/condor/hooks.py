"""The job-router hooks' side: tiny, standard-library-only, and always failing open.

HTCondor starts a hook process per job, so start-up time is the hook's cost.
This module therefore imports only interpreter built-ins (``_socket``,
``_signal``: the ``socket``/``signal``/``json`` wrappers cost more than the
whole request) and never ``classad2`` or PycURL: the ClassAd work and the
signed calls to the pool happen in the submit agent (:mod:`htda.condor.agent`)
on the same host, which these functions reach over loopback.

Rules of every hook here: read all of standard input; whatever happens, exit
0 within the configured deadline (a socket timeout, and a hard ``SIGALRM`` as
the last resort); the translate hook prints either the agent's new ad or the
job ad it was given, unchanged.  Problems go to the log file (or stderr,
which the job router records).
"""

from __future__ import annotations

import _signal
import _socket
import os
import sys
import time

__all__ = ["translate_main", "update_main", "finalize_main", "cleanup_main", "load_settings", "split",
           "SEPARATOR", "DEFAULTS"]

SEPARATOR = b"------"
CONFIG_ENV = "HTDA_HOOKS_CONFIG"
CONFIG_PATH = "/etc/htda/hooks.toml"

DEFAULTS: dict[str, object] = {
    "node": "http://127.0.0.1:8740",  # this host's htda-node: the submit agent (workers: the cache node)
    "timeout": 0.5,  # seconds, for the whole hook run
    "log": "",  # a file to append problems to; empty: standard error
    "max_ad_bytes": 1024 * 1024,  # larger ads are echoed without asking the agent
}


class _Deadline(Exception):
    """The hard alarm fired."""


def _on_alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Deadline()


def split(data: bytes) -> tuple[bytes | None, bytes]:
    """(route ad or None, job ad) of hook input: the route line, ``------``, the job ad.

    Input without the separator line is a job ad alone.
    """
    head, sep, tail = data.partition(b"\n" + SEPARATOR + b"\n")
    if sep:
        return head, tail
    if data.startswith(SEPARATOR + b"\n"):
        return b"", data[len(SEPARATOR) + 1:]
    return None, data


def load_settings(path: str | None = None) -> dict[str, object]:
    """The hooks' settings: a flat TOML file (``key = value`` lines, strings, numbers, booleans).

    A missing file means the defaults; an unreadable or odd line is ignored
    (a hook never fails on its config).
    """
    settings = dict(DEFAULTS)
    path = path or os.environ.get(CONFIG_ENV) or CONFIG_PATH
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return settings
    for line in lines:
        key, eq, raw = line.partition("=")
        key, raw = key.strip(), raw.split(" #", 1)[0].strip()
        if not eq or key.startswith("#") or key not in DEFAULTS:
            continue
        value = _scalar(raw)
        if value is not None and type(value) is type(DEFAULTS[key]):
            settings[key] = value
        elif isinstance(DEFAULTS[key], float) and isinstance(value, int) and not isinstance(value, bool):
            settings[key] = float(value)
    return settings


def _scalar(raw: str) -> object:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    if raw in ("true", "false"):
        return raw == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return None


class _Log:
    def __init__(self, path: str, hook: str):
        self.path, self.hook = path, hook

    def __call__(self, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} htda_{self.hook}[{os.getpid()}]: {message}\n".encode()
        try:
            if self.path:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
            else:
                os.write(2, line)
        except OSError:
            pass  # logging must never fail the hook


def _read_stdin() -> bytes:
    """All of standard input (the router closes it after the ad)."""
    chunks = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _post(node: str, path: str, body: bytes, deadline: float, method: str = "POST") -> tuple[int, bytes]:
    """One HTTP/1.1 request to this host's node; (status, body).  Raises OSError on trouble."""
    rest = node.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    family = _socket.AF_INET6 if ":" in host else _socket.AF_INET
    sock = _socket.socket(family, _socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.connect((host, int(port or 80)))
        head = (f"{method} {path} HTTP/1.1\r\nHost: {rest}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        sock.sendall(head + body)
        chunks = []
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        sock.close()
    return _parse_response(b"".join(chunks))


def _parse_response(raw: bytes) -> tuple[int, bytes]:
    head, sep, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status_line) < 2 or not status_line[1].isdigit():
        raise OSError(f"not an HTTP answer: {raw[:60]!r}")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and int(value) != len(body):
            raise OSError(f"answer cut short: {len(body)} of {int(value)} bytes")
    return int(status_line[1]), body


def _run(hook: str, work) -> int:
    """Common frame: settings, deadline, stdin, fail-open; ``work(settings, data, deadline, log)``."""
    started = time.monotonic()
    settings = load_settings()
    log = _Log(str(settings["log"]), hook)
    timeout = float(settings["timeout"])
    deadline = started + timeout
    data = b""
    try:
        _signal.signal(_signal.SIGALRM, _on_alarm)
        _signal.setitimer(_signal.ITIMER_REAL, timeout)
        data = _read_stdin()
        if len(data) > int(settings["max_ad_bytes"]):
            log(f"ad of {len(data)} bytes is over max_ad_bytes={settings['max_ad_bytes']}: left unchanged")
            return _fail_open(hook, data)
        return work(settings, data, deadline, log)
    except _Deadline:
        log(f"deadline of {timeout:g}s reached: left unchanged")
    except Exception as exc:  # noqa: BLE001 - fail open on anything at all
        log(f"{type(exc).__name__}: {exc}: left unchanged")
    try:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        return _fail_open(hook, data)
    except Exception:  # noqa: BLE001
        return 0


def _fail_open(hook: str, data: bytes) -> int:
    """The protocol's "no change": the translate hook echoes the job ad, the others print nothing."""
    if hook == "translate":
        _write_all(1, split(data)[1])
    return 0


def _translate(settings, data: bytes, deadline: float, log) -> int:
    status, body = _post(str(settings["node"]), "/api/v1/submit/translate", data, deadline)
    _signal.setitimer(_signal.ITIMER_REAL, 0)
    if status != 200 or not _looks_like_the_job(body, split(data)[1]):
        log(f"agent answered HTTP {status}: {body[:200]!r}: left unchanged")
        return _fail_open("translate", data)
    _write_all(1, body)
    return 0


def _looks_like_the_job(answer: bytes, job: bytes) -> bool:
    """A cheap guard against printing a garbled answer (the router would drop the job): every
    line is ``Name = expression`` and there are at least as many as the job had."""
    lines = [line for line in answer.splitlines() if line.strip()]
    return bool(lines) and len(lines) >= len([x for x in job.splitlines() if x.strip()]) and all(
        b" = " in line for line in lines)


def _lifecycle(hook: str):
    def work(settings, data: bytes, deadline: float, log) -> int:
        status, body = _post(str(settings["node"]), f"/api/v1/submit/events?hook={hook}", data, deadline)
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        if status != 200:
            log(f"agent answered HTTP {status}: {body[:200]!r}")
        return 0
    return work


def translate_main() -> int:
    """``<KEYWORD>_HOOK_TRANSLATE_JOB``: print the job ad with HTDA's steering, or unchanged."""
    return _run("translate", _translate)


def update_main() -> int:
    """``<KEYWORD>_HOOK_UPDATE_JOB_INFO``: report the job's state; change nothing."""
    return _run("update_job_info", _lifecycle("update"))


def finalize_main() -> int:
    """``<KEYWORD>_HOOK_JOB_FINALIZE`` (alias ``_JOB_EXIT``): report the end; change nothing."""
    return _run("job_finalize", _lifecycle("finalize"))


def cleanup_main() -> int:
    """``<KEYWORD>_HOOK_JOB_CLEANUP``: report a removal or end; exit 0 so it is not retried."""
    return _run("job_cleanup", _lifecycle("cleanup"))


if __name__ == "__main__":  # pragma: no cover - the executables in hooks/ are the entry points
    sys.exit(translate_main())
