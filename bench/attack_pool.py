"""The live pool ``bench/attacks.py`` attacks: a service node and a worker with a mergerfs view, two users.

Storage holds, like a site's would, files of two ordinary accounts::

    private/secret.txt        userb:userb 0600 in a 0700 directory
    public/usera-data.txt     usera:usera 0644
    home/usera/               usera:usera 0755 (usera's jobs write here)

The worker runs under the ``CapabilityBoundingSet`` of ``systemd/htda-cache@.service``, so the view behaves as
it would under the shipped unit.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import classad2
import pycurl

from htda.node.client import Client, ClientError
from htda.protocol import paths
from testkit.nodes import SECRET, NodeProcess, free_port, wait_until, write_config
from tests.htcondor_home import condor_tool
from tests.users import User, ensure_user, run_as

__all__ = ["AttackPool", "unit_bounding_set"]

REPO = Path(__file__).resolve().parent.parent
CACHE_UNIT = REPO / "systemd" / "htda-cache@.service"


def unit_bounding_set(unit: Path = CACHE_UNIT) -> list[str]:
    """The capabilities a unit's ``CapabilityBoundingSet=`` lines leave (lower case, without ``cap_``)."""
    caps: list[str] = []
    for line in unit.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "CapabilityBoundingSet":
            caps = [] if not value.strip() else caps + [c.lower().removeprefix("cap_") for c in value.split()]
    return caps


def _under_cache_unit() -> tuple[str, ...]:
    """setpriv with the cache unit's capability bounding set: the worker runs as the shipped unit would run it."""
    caps = ",".join(["-all", *(f"+{c}" for c in unit_bounding_set())])
    return ("setpriv", f"--bounding-set={caps}", "--")


class AttackPool:
    """Two nodes, storage with two users' files, and the means to act as those users."""

    expiry = 4.0

    def __init__(self, base: Path):
        self.base = base
        self.storage = base / "storage"
        self.view = base / "view"
        self.device = base / "etc" / "data" / "worker" / "dev0"
        self.users: dict[str, User] = {name: ensure_user(name) for name in ("usera", "userb")}
        self.run_dir = Path(tempfile.mkdtemp(prefix="htda-attacks-", dir="/run"))  # root's, 0755: as /run/htda
        self.run_dir.chmod(0o755)
        self.agent_socket = self.run_dir / "submit.sock"
        self.hooks: dict[str, Path] = {}
        self.contents: dict[str, str] = {}
        self.nodes: dict[str, NodeProcess] = {}
        self.signed = Client(SECRET.encode(), timeout=5.0, retries=0)
        self.anonymous = Client(None, timeout=5.0, retries=0)

    # -- set-up -------------------------------------------------------------------------------------------
    @classmethod
    @contextmanager
    def started(cls) -> Iterator["AttackPool"]:
        base = Path(tempfile.mkdtemp(prefix="htda-attacks-"))
        base.chmod(0o755)  # the users must reach the view and the device beneath it
        pool = cls(base)
        try:
            pool._make_storage()
            pool._start_nodes()
            pool._install_hooks()
            yield pool
        finally:
            pool._stop()
            shutil.rmtree(base, ignore_errors=True)
            shutil.rmtree(pool.run_dir, ignore_errors=True)

    def _make_storage(self) -> None:
        self._put("/private/secret.txt", "userb's secret\n", "userb", 0o600, dir_mode=0o700)
        self._put("/public/usera-data.txt", "usera's data\n", "usera", 0o644, dir_mode=0o755)
        home = self.storage / "home" / "usera"
        home.mkdir(parents=True)
        self._chown(home, "usera", 0o755)
        self.storage.chmod(0o755)
        (self.storage / "home").chmod(0o755)

    def _put(self, lfn: str, text: str, owner: str, mode: int, dir_mode: int) -> None:
        path = self.storage / lfn.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self._chown(path, owner, mode)
        self._chown(path.parent, owner, dir_mode)
        self.contents[lfn] = text

    def _chown(self, path: Path, owner: str, mode: int) -> None:
        user = self.users[owner]
        os.chown(path, user.uid, user.gid)
        path.chmod(mode)

    def _start_nodes(self) -> None:
        etc = self.base / "etc"
        service_port, worker_port = free_port(), free_port()
        seed = f"http://127.0.0.1:{service_port}"
        common = {"interval": 0.5, "expiry": self.expiry}
        service = write_config(etc, "service", ["coordinator", "locator", "submit"], service_port, [seed],
                               sections={"coordinator": {"cycle": 0.5},
                                         "submit": {"socket": str(self.agent_socket)}}, **common)
        worker = write_config(etc, "worker", ["cache"], worker_port, [seed], sections={"cache": {
            "storage": "posix", "storage_location": str(self.storage), "devices": [{"path": str(self.device)}],
            "union": "mergerfs", "view": str(self.view), "cycle": 0.5, "holdings_interval": 1.0,
            "retry_delay": 0.5}}, **common)
        self.nodes["service"] = NodeProcess(service).start()
        self.nodes["worker"] = NodeProcess(worker, launcher=_under_cache_unit()).start(timeout=30)
        wait_until(lambda: {"service", "worker"} <= self.members("service"), timeout=20, what="the pool to form")

    def _install_hooks(self) -> None:
        """HTDA's hooks as a site installs them (``hooks/install-hooks``), Python and native, with settings."""
        for variant in ("python", "native"):
            target = self.base / f"hooks-{variant}"
            argv = [sys.executable, str(REPO / "hooks" / "install-hooks"), *(["--native"] if variant == "native"
                                                                              else []), str(target)]
            subprocess.run(argv, check=True, capture_output=True, timeout=120)
            self.hooks[variant] = target
        self.settings = self.hook_settings(self.agent_socket)

    def hook_settings(self, socket_path: Path, name: str = "hooks") -> Path:
        path = self.base / f"{name}.toml"
        path.write_text(f'socket = "{socket_path}"\ntimeout = 0.5\n')
        path.chmod(0o644)
        return path

    def hook(self, user: str, variant: str, name: str, stdin: bytes, settings: Path | None = None,
             read_after: float = 0.0) -> tuple[int, bytes]:
        """Run an installed hook as ``user``; (exit status, standard output), read ``read_after`` s late."""
        account = self.users[user]
        argv = ["setpriv", f"--reuid={account.uid}", f"--regid={account.gid}", "--clear-groups", "--",
                str(self.hooks[variant] / name)]
        env = {"PATH": "/usr/bin:/bin", "HTDA_HOOKS_CONFIG": str(settings or self.settings)}
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=env)
        feeder = threading.Thread(target=_feed, args=(proc, stdin), daemon=True)
        feeder.start()
        time.sleep(read_after)
        out = proc.stdout.read()
        return proc.wait(timeout=30), out

    def agent_metric(self, name: str, **labels: str) -> float:
        """A sample of the service node's /metrics (0 when absent)."""
        text = self.anonymous.get_text(self.url("service") + "/metrics") if hasattr(self.anonymous, "get_text") \
            else _get(self.url("service") + "/metrics")
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for line in text.splitlines():
            if line.startswith(f"{name}{{{want}}}"):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def start_tls_node(self, pki: Path, allowed: list[str]) -> NodeProcess:
        """A third node serving HTTPS that requires client certificates on ``allowed``."""
        for name in ("ca.pem", "seed.pem", "seed.key"):
            shutil.copy(pki / name, self.base / "etc" / name)
        tls = {"enabled": True, "certificate": "seed.pem", "private_key": "seed.key", "ca_file": "ca.pem",
               "verify_clients": True, "allowed_clients": allowed}
        port = free_port()
        config = write_config(self.base / "etc", "tls", ["locator"], port, [f"https://127.0.0.1:{port}"],
                              sections={"tls": tls}, scheme="https")
        node = NodeProcess(config)
        node.client.close()
        node.client = Client(None, retries=0, ca_file=str(pki / "ca.pem"), client_cert=str(pki / "admin.pem"),
                             client_key=str(pki / "admin.key"))
        self.nodes["tls"] = node.start()
        return node

    @staticmethod
    def exposure(unit: str) -> float:
        """``systemd-analyze security`` of a shipped unit (offline), or NaN where systemd-analyze is missing."""
        if shutil.which("systemd-analyze") is None:
            return float("nan")
        proc = subprocess.run(["systemd-analyze", "security", "--offline=true", str(REPO / "systemd" / unit)],
                              capture_output=True, text=True, timeout=120)
        found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout)
        return float(found.group(1)) if found else float("nan")

    def scratch_root(self) -> Path:
        """The shipped sysusers and tmpfiles rules applied to a scratch root, with settings and a secret in place."""
        root = self.base / "root"
        (root / "etc").mkdir(parents=True)
        root.chmod(0o755)
        for name in ("passwd", "group"):
            shutil.copy(f"/etc/{name}", root / "etc" / name)
        subprocess.run(["systemd-sysusers", f"--root={root}", str(REPO / "systemd" / "htda.sysusers")],
                       check=True, capture_output=True, timeout=60)
        tmpfiles = ["systemd-tmpfiles", "--create", f"--root={root}", str(REPO / "systemd" / "htda.tmpfiles")]
        subprocess.run(tmpfiles, check=True, capture_output=True, timeout=60)
        for name in ("hooks.toml", "pool.secret"):
            (root / "etc/htda" / name).write_text("x = 1\n")
            (root / "etc/htda" / name).chmod(0o600)  # as a careless install leaves them: tmpfiles puts them right
        subprocess.run(tmpfiles, check=True, capture_output=True, timeout=60)
        return root

    def _stop(self) -> None:
        for node in reversed(list(self.nodes.values())):
            node.stop()
        if self.view.is_mount():
            subprocess.run(["umount", "-l", str(self.view)], check=False)
        self.signed.close()
        self.anonymous.close()

    # -- acting -------------------------------------------------------------------------------------------
    def url(self, node: str) -> str:
        return self.nodes[node].url

    def as_user(self, name: str, argv: list[str]) -> subprocess.CompletedProcess:
        return run_as(self.users[name], argv)

    def stage_for(self, owner: str, lfn: str, timeout: float = 30.0) -> bool:
        """Submit a job of ``owner`` naming ``lfn`` (as the submit agent would) and wait for the worker's copy."""
        job = {"job_id": f"attack-{owner}-{lfn}-{time.monotonic_ns()}", "owner": owner, "inputs": [lfn]}
        self.signed.post(self.url("service") + paths.JOBS, {"jobs": [job]})
        self.signed.post(self.url("service") + paths.CYCLE, {})
        try:
            wait_until(lambda: lfn in self.held(), timeout=timeout, what=f"{lfn} cached")
        except TimeoutError:
            return False
        return True

    def held(self) -> set[str]:
        files = self.signed.get(self.url("worker") + paths.CACHE_FILES)["files"]
        return {f["lfn"] for f in files}

    def device_copy(self, lfn: str) -> Path:
        return self.device / "data" / lfn.lstrip("/")

    def staging_dir(self) -> Path:
        return self.device / "staging"

    @staticmethod
    def owner_and_mode(path: Path) -> str:
        st = path.stat()
        return f"{_name(pwd.getpwuid, st.st_uid)}:{_name(grp.getgrgid, st.st_gid)} {st.st_mode & 0o7777:04o}"

    def members(self, node: str) -> set[str]:
        return self.nodes[node].members()

    def anonymous_status(self, node: str, method: str, path: str) -> int:
        return _status(self.url(node) + path, method)

    def raw_status(self, node: str, method: str, path: str, body: bytes, authorization: str) -> int:
        """Send exactly these bytes and this Authorization header; the status."""
        return _status(self.url(node) + path, method, body, [f"Authorization: {authorization}",
                                                              "Content-Type: application/json"])

    def healthz_seconds(self, node: str) -> float:
        started = time.monotonic()
        try:
            self.anonymous.get(self.url(node) + "/healthz", timeout=5.0)
        except ClientError:
            return 5.0
        return time.monotonic() - started

    def rss_mb(self, node: str) -> float:
        proc = self.nodes[node].proc
        assert proc is not None
        status = Path(f"/proc/{proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024

    def unsigned_upload(self, node: str, path: str, size: int) -> tuple[int, int]:
        """POST ``size`` bytes unsigned; (status, bytes the server let us send before answering)."""
        sent = 0
        chunk = b"\0" * (1 << 20)

        def read(n: int) -> bytes:
            nonlocal sent
            piece = chunk[:min(n, size - sent)]
            sent += len(piece)
            return piece

        curl = pycurl.Curl()
        try:
            curl.setopt(pycurl.URL, self.url(node) + path)
            curl.setopt(pycurl.POST, 1)
            curl.setopt(pycurl.READFUNCTION, read)
            curl.setopt(pycurl.POSTFIELDSIZE_LARGE, size)
            curl.setopt(pycurl.HTTPHEADER, ["Content-Type: application/json", "Expect:"])
            curl.setopt(pycurl.WRITEFUNCTION, lambda data: None)
            curl.setopt(pycurl.TIMEOUT, 120)
            try:
                curl.perform()
            except pycurl.error:
                pass  # the server may close while we still send: the status line came first
            return curl.getinfo(pycurl.RESPONSE_CODE), sent
        finally:
            curl.close()

    @contextmanager
    def half_open_connections(self, node: str, count: int) -> Iterator[int]:
        """``count`` connections that send half a request line and headers, then stall; yields how many opened."""
        port = int(self.url(node).rsplit(":", 1)[1])
        socks: list[socket.socket] = []
        try:
            for i in range(count):
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.sendall(b"POST /api/v1/pool/heartbeat HTTP/1.1\r\nHost: x\r\n" if i % 2 else b"GET /hea")
                socks.append(s)
            yield len(socks)
        finally:
            for s in socks:
                s.close()


    # -- HTCondor's view of the shipped snippets ------------------------------------------------------------
    def condor_val(self, knob: str, site: str = "") -> str | None:
        """``knob`` as ``condor_config_val`` reads a site config (``site``) followed by HTDA's snippets."""
        tool = condor_tool("condor_config_val")
        if tool is None:
            return "(no HTCondor found)"
        root = Path(tempfile.mkdtemp(dir=self.base))
        snippets = sorted((REPO / "config" / "htcondor").glob("*.config"))
        (root / "00-site.config").write_text(site)
        includes = "".join(f"include : {p}\n" for p in [root / "00-site.config", *snippets])
        (root / "condor_config").write_text(f"RELEASE_DIR = {tool.parent.parent}\nLOCAL_DIR = {root}\n{includes}")
        env = {"CONDOR_CONFIG": str(root / "condor_config"), "PATH": "/usr/bin:/bin"}
        proc = subprocess.run([str(tool), knob], env=env, capture_output=True, text=True, timeout=60)
        return proc.stdout.strip() if proc.returncode == 0 else None

    @staticmethod
    def pre_job_rank(affinity: float, claimed: bool, memory: int = 2000) -> float:
        """The shipped NEGOTIATOR_PRE_JOB_RANK of one slot for a job with this affinity, kept as a float32."""
        text = (REPO / "config" / "htcondor" / "50-htda-negotiator.config").read_text()
        expression = re.search(r"^NEGOTIATOR_PRE_JOB_RANK\s*=\s*(.+)$", text, re.MULTILINE).group(1)
        machine = classad2.ClassAd({"Cpus": 1, "Memory": memory, "Rank": 0.0})
        if claimed:
            machine["RemoteOwner"] = "bob@example.org"
        job = classad2.ClassAd({"HTDA_CacheAffinity": affinity})
        value = classad2.ExprTree(expression).eval(machine, job)
        return struct.unpack("f", struct.pack("f", float(value)))[0]


def job_ad(owner: str, **extra: str) -> str:
    """A small old-syntax job ad of ``owner`` as the schedd hands it to the router's hooks (sorted)."""
    attrs = {"ClusterId": "7", "ProcId": "0", "GlobalJobId": f'"submit#7.0#{time.time_ns()}"', "Owner": f'"{owner}"',
             "User": f'"{owner}@example.org"', "Cmd": '"/bin/analysis"', "Args": '"--events 10"', "JobUniverse": "5",
             "JobStatus": "1", "Iwd": '"/tmp"', "QDate": str(int(time.time())), "RequestCpus": "1",
             "RequestMemory": "2000", "Requirements": "true", "HTDA_InputFiles": '"/public/usera-data.txt"', **extra}
    return "".join(f"{name} = {value}\n" for name, value in sorted(attrs.items()))


def hook_input(ad: str) -> bytes:
    return ('[ Name = "HTDA"; EditJobInPlace = true ]\n------\n' + ad).encode()


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except OSError:
        pass  # the hook stopped reading: its problem to report


def _get(url: str) -> str:
    chunks: list[bytes] = []
    curl = pycurl.Curl()
    try:
        curl.setopt(pycurl.URL, url)
        curl.setopt(pycurl.WRITEFUNCTION, chunks.append)
        curl.setopt(pycurl.TIMEOUT, 10)
        curl.perform()
    finally:
        curl.close()
    return b"".join(chunks).decode()


def _name(lookup, ident: int) -> str:
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def _status(url: str, method: str, body: bytes = b"", headers: list[str] | None = None) -> int:
    curl = pycurl.Curl()
    try:
        curl.setopt(pycurl.URL, url)
        curl.setopt(pycurl.CUSTOMREQUEST, method)
        if body:
            curl.setopt(pycurl.POSTFIELDS, body)
        curl.setopt(pycurl.HTTPHEADER, headers or [])
        curl.setopt(pycurl.WRITEFUNCTION, lambda data: None)
        curl.setopt(pycurl.TIMEOUT, 10)
        curl.perform()
        return curl.getinfo(pycurl.RESPONSE_CODE)
    finally:
        curl.close()
