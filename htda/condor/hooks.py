"""The job-router hooks' side: tiny, standard-library-only, and always failing open.

HTCondor starts a hook process per job, so start-up time is the hook's cost.
This module therefore imports only interpreter built-ins (``_socket``,
``_signal``, ``pwd``: the ``socket``/``signal``/``json`` wrappers cost more
than the whole request) and never ``classad2`` or PycURL: the ClassAd work and
the signed calls to the pool happen in the submit agent
(:mod:`htda.condor.agent`) on the same host.

Hooks run as the job's owner, so what answers them decides what that user's
job becomes.  They therefore talk to the agent only through a UNIX socket in
a directory that only root or the agent's account can write (``socket``,
``/run/htda/submit.sock``), never a TCP port another user could take while
the agent is down: before sending anything a hook checks that the directory
and the socket belong to root or ``agent_user`` and that the directory is
writable by no one else, and after connecting that the process listening
runs as one of them (``SO_PEERCRED``).  The agent's answer lists attributes
to set; the hook applies it only when each attribute it changes or adds is
HTDA's to change (:data:`ALLOWED_ATTRIBUTES`, ``HTDA_*``), and keeps every
other line of the job ad byte for byte.

Rules of every hook here: read all of standard input; whatever happens, exit
0 within the configured deadline (a socket timeout, and a hard ``SIGALRM`` as
the last resort); the translate hook prints the job ad exactly once, with
HTDA's changes or unchanged.  Problems go to the log file (or stderr, which
the job router records).
"""

from __future__ import annotations

import _signal
import _socket
import os
import pwd
import sys
import time

from ..protocol import paths

__all__ = ["translate_main", "update_main", "finalize_main", "cleanup_main", "load_settings", "read_settings",
           "split", "apply_answer", "node_request", "SEPARATOR", "DEFAULTS", "SUBMIT_SOCKET", "AGENT_USER",
           "TRANSLATE_PATH", "EVENTS_PATH", "ALLOWED_ATTRIBUTES", "ALLOWED_PREFIX", "CONFIG_PATH", "allowed"]

SEPARATOR = b"------"
CONFIG_ENV = "HTDA_HOOKS_CONFIG"
CONFIG_PATH = "/etc/htda/hooks.toml"
#: where the submit agent listens: the default of ``[submit] socket`` and of the hooks' ``socket``
SUBMIT_SOCKET = "/run/htda/submit.sock"
#: the account the agent runs as (systemd/htda.sysusers); hooks trust it and root, nobody else
AGENT_USER = "htda"
TRANSLATE_PATH = paths.TRANSLATE
EVENTS_PATH = paths.SUBMIT_EVENTS  # ?hook=update|finalize|cleanup
#: the job attributes (besides ``HTDA_*``) a translate hook may change or add; compared case-insensitively
ALLOWED_ATTRIBUTES = ("Rank", "Requirements", "JobMachineAttrs", "JobPrio")
ALLOWED_PREFIX = "HTDA_"

#: the type of a setting's value (hooks.toml is flat: strings, numbers and booleans)
Setting = str | int | float | bool

DEFAULTS: dict[str, Setting] = {
    "socket": SUBMIT_SOCKET,  # the submit agent (job-router hooks)
    "agent_user": AGENT_USER,  # besides root, the only account the agent's socket may belong to
    "node": "http://127.0.0.1:8740",  # this host's htda-node, for the startd cron on workers
    "watch_interval": 2.0,  # seconds between the startd cron's looks at its node (--watch): htda.condor.startd_cron
    "cron_period": 60.0,  # without --watch: seconds between its runs (STARTD_CRON_HTDA_PERIOD, MODE = Periodic)
    "timeout": 0.5,  # seconds, for the whole hook run
    "log": "",  # a file to append problems to; empty: standard error
    "max_ad_bytes": 1024 * 1024,  # larger ads are echoed without asking the agent
}

_ALLOWED = frozenset(name.lower() for name in ALLOWED_ATTRIBUTES)
_S_IFMT, _S_IFDIR, _S_IFSOCK = 0o170000, 0o040000, 0o140000


class _Deadline(Exception):
    """The hard alarm fired."""


def _on_alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Deadline()


def _ignore(signum, frame):  # noqa: ARG001 - a late alarm once the output has begun
    return None


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


# -- settings --------------------------------------------------------------------------------------

def read_settings(path: str | None = None) -> tuple[dict[str, Setting], str | None]:
    """(settings, problem): the hooks' settings from a flat TOML file, and why the file was not
    read when it exists but cannot be (the hook then runs on the defaults and logs the problem).

    A missing file means the defaults; an odd line or unknown key is ignored (a hook never fails on
    its config).
    """
    settings = dict(DEFAULTS)
    path = path or os.environ.get(CONFIG_ENV) or CONFIG_PATH
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return settings, None
    except (OSError, UnicodeDecodeError) as exc:
        return settings, f"settings {path} not read ({type(exc).__name__}: {exc}): using the defaults"
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
    return settings, None


def load_settings(path: str | None = None) -> dict[str, Setting]:
    """The hooks' settings (see :func:`read_settings`)."""
    return read_settings(path)[0]


def _scalar(raw: str) -> Setting | None:
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


# -- input and output ------------------------------------------------------------------------------

def _read_stdin() -> bytes:
    """All of standard input (the router closes it after the ad)."""
    chunks: list[bytes] = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Output:
    """Standard output, written at most once.

    The alarm is disarmed before the first byte goes out: the router may read slowly, and an alarm
    in the middle of the write would otherwise print the ad a second time (or a late one, cut short).
    """

    def __init__(self, hook: str):
        self.hook, self.job, self.done = hook, b"", False

    def emit(self, data: bytes) -> int:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        _signal.signal(_signal.SIGALRM, _ignore)
        if not self.done:
            self.done = True
            _write_all(1, data)
        return 0

    def unchanged(self) -> int:
        """The protocol's "no change": the translate hook echoes the job ad, the others print nothing."""
        return self.emit(self.job if self.hook == "translate" else b"")


# -- the channel to the agent ----------------------------------------------------------------------

def _trusted_uids(agent_user: str) -> set[int]:
    uids = {0}
    try:
        uids.add(pwd.getpwnam(agent_user).pw_uid)
    except (KeyError, OSError):
        pass  # no such account here: root only
    return uids


def _check_path(path: str, kind: int, uids: set[int], what: str) -> None:
    st = os.lstat(path)  # lstat: a symbolic link is refused, not followed
    if st.st_mode & _S_IFMT != kind:
        raise OSError(f"{what} {path} is not a {'directory' if kind == _S_IFDIR else 'socket'}")
    if st.st_uid not in uids:
        raise OSError(f"{what} {path} belongs to uid {st.st_uid}, not to root or the agent's account")
    if kind == _S_IFDIR and st.st_mode & 0o022:
        raise OSError(f"{what} {path} is writable by others (mode {st.st_mode & 0o7777:o})")


def connect_agent(settings: dict[str, Setting], deadline: float) -> _socket.socket:
    """A connection to the submit agent, made only when nobody but root or ``agent_user`` can have
    made the socket, and kept only when the process answering runs as one of them (SO_PEERCRED)."""
    path = str(settings["socket"])
    if not path.startswith("/"):
        raise OSError(f"socket {path!r} is not an absolute path")
    uids = _trusted_uids(str(settings["agent_user"]))
    _check_path(path.rpartition("/")[0] or "/", _S_IFDIR, uids, "the socket's directory")
    _check_path(path, _S_IFSOCK, uids, "the agent's socket")
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.connect(path)
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
        uid = int.from_bytes(creds[4:8], sys.byteorder)
        if uid not in uids:
            raise OSError(f"the process serving {path} runs as uid {uid}, not as root or the agent's account")
    except BaseException:
        sock.close()
        raise
    return sock


def _exchange(sock: _socket.socket, request: bytes, deadline: float) -> tuple[int, bytes]:
    """Send one HTTP/1.1 request (``Connection: close``) and read the whole answer; (status, body)."""
    try:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(request)
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


def _request(method: str, path: str, host: str, body: bytes) -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def ask_agent(settings: dict[str, Setting], path: str, body: bytes, deadline: float) -> tuple[int, bytes]:
    """POST ``body`` to the submit agent over its socket; (status, body).  Raises OSError on trouble."""
    return _exchange(connect_agent(settings, deadline), _request("POST", path, "localhost", body), deadline)


def node_request(node: str, path: str, deadline: float, method: str = "GET", body: bytes = b"") -> tuple[int, bytes]:
    """One HTTP/1.1 request to this host's node over TCP (the startd cron's read-only queries)."""
    rest = node.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    sock = _socket.socket(_socket.AF_INET6 if ":" in host else _socket.AF_INET, _socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.connect((host, int(port or 80)))
    except BaseException:
        sock.close()
        raise
    return _exchange(sock, _request(method, path, rest, body), deadline)


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


# -- the allow-list --------------------------------------------------------------------------------

def allowed(name: str) -> bool:
    """Whether a translate hook may change, add or remove the job attribute ``name``."""
    lower = name.lower()
    return lower in _ALLOWED or lower.startswith(ALLOWED_PREFIX.lower())


def _assignment(line: bytes) -> tuple[str, bytes] | None:
    """(attribute name, expression) of a ``Name = expression`` line; None if it is not one."""
    name, eq, value = line.partition(b"=")
    name, value = name.strip(), value.strip()
    if not eq or not value or not name or not (name[:1].isalpha() or name[:1] == b"_"):
        return None
    if not name.replace(b"_", b"").isalnum() or not name.isascii():
        return None
    return name.decode("ascii"), value


_CLOSING = {ord(")"): ord("("), ord("]"): ord("["), ord("}"): ord("{")}


def _balanced(expression: bytes) -> bool:
    """Whether brackets pair up and strings end (old syntax: ``\\"`` inside a string is a quote).

    Not a parser (the hooks hold none), but the router drops a job from routing for good when a line
    of a hook's output does not parse, so an expression cut short or garbled is refused here.
    """
    stack: list[int] = []
    quoted = escaped = False
    for c in expression:
        if quoted:
            quoted, escaped = (escaped or c != 0x22), (not escaped and c == 0x5C)
        elif c == 0x22:
            quoted = True
        elif c in b"([{":
            stack.append(c)
        elif c in _CLOSING and (not stack or stack.pop() != _CLOSING[c]):
            return False
    return not quoted and not stack


def apply_answer(job: bytes, answer: bytes) -> bytes:
    """The job ad with the agent's answer (``Name = expression`` lines to set) applied.

    Each line of the job ad is kept byte for byte unless the answer sets its attribute; attributes
    the answer sets that the job lacks are added at the end.  An answer line that repeats the job's
    own expression changes nothing.  Raises ValueError when the answer would change or add an
    attribute that is not HTDA's (:func:`allowed`), or holds a line that is not an assignment.
    """
    given: dict[str, bytes] = {}
    for line in job.split(b"\n"):
        parsed = _assignment(line)
        if parsed:
            given[parsed[0].lower()] = parsed[1]
    changes: dict[str, bytes] = {}
    for line in answer.split(b"\n"):
        if not line.strip():
            continue
        parsed = _assignment(line)
        if parsed is None:
            raise ValueError(f"the answer holds a line that is not 'Name = expression': {line[:80]!r}")
        key = parsed[0].lower()
        if key in changes:
            raise ValueError(f"the answer sets {parsed[0]} twice")
        if given.get(key) == parsed[1]:
            continue
        if not allowed(parsed[0]):
            raise ValueError(f"the answer changes {parsed[0]}, which is not HTDA's to change")
        if not _balanced(parsed[1]):
            raise ValueError(f"the answer's {parsed[0]} is not a complete expression")
        changes[key] = parsed[0].encode() + b" = " + parsed[1]
    if not changes:
        return job
    out = []
    for line in job.split(b"\n"):
        parsed = _assignment(line)
        out.append(changes.pop(parsed[0].lower()) if parsed and parsed[0].lower() in changes else line)
    if out and out[-1] == b"":
        out.pop()  # the job's final newline: added back after the new attributes
    return b"\n".join(out + list(changes.values())) + b"\n"


# -- the hooks -------------------------------------------------------------------------------------

def _run(hook: str, work) -> int:
    """Common frame: settings, deadline, stdin, fail-open; ``work(settings, data, deadline, log, out)``."""
    started = time.monotonic()
    settings, problem = read_settings()
    log = _Log(str(settings["log"]), hook)
    if problem:
        log(problem)
    out = _Output(hook)
    timeout = float(settings["timeout"])
    try:
        _signal.signal(_signal.SIGALRM, _on_alarm)
        _signal.setitimer(_signal.ITIMER_REAL, timeout)
        data = _read_stdin()
        out.job = split(data)[1]
        if len(data) > int(settings["max_ad_bytes"]):
            log(f"ad of {len(data)} bytes is over max_ad_bytes={settings['max_ad_bytes']}: left unchanged")
            return out.unchanged()
        return work(settings, data, started + timeout, log, out)
    except _Deadline:
        log(f"deadline of {timeout:g}s reached: left unchanged")
    except Exception as exc:  # noqa: BLE001 - fail open on anything at all
        log(f"{type(exc).__name__}: {exc}: left unchanged")
    try:
        return out.unchanged()
    except Exception:  # noqa: BLE001
        return 0


def _translate(settings, data: bytes, deadline: float, log, out: _Output) -> int:
    status, body = ask_agent(settings, TRANSLATE_PATH, data, deadline)
    if status != 200:
        log(f"agent answered HTTP {status}: {body[:200]!r}: left unchanged")
        return out.unchanged()
    try:
        return out.emit(apply_answer(out.job, body))
    except ValueError as exc:
        log(f"{exc}: left unchanged")
        return out.unchanged()


def _lifecycle(hook: str):
    def work(settings, data: bytes, deadline: float, log, out: _Output) -> int:
        status, body = ask_agent(settings, f"{EVENTS_PATH}?hook={hook}", data, deadline)
        if status != 200:
            log(f"agent answered HTTP {status}: {body[:200]!r}")
        return out.unchanged()
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
