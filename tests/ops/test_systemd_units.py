"""The systemd units in ``systemd/``: they verify, keep their hardening and exposure scores, and the daemons
really run under what the units grant.

PID 1 here is not systemd, so the sandbox a unit gives is rebuilt from the unit file itself with the same kernel
mechanisms systemd uses (see :class:`Sandbox`): the capability bounding set (``setpriv``), no new privileges, the
system-call filter resolved by ``systemd-analyze syscall-filter`` and loaded with libseccomp like systemd does,
``RestrictAddressFamilies``, ``RestrictNamespaces``, ``RestrictSUIDSGID``, ``MemoryDenyWriteExecute``, ``User=``
and, for the cache unit, the device policy (a cgroup v1 device controller).  The mount-namespace settings are not
rebuilt: the cache unit must have none (a test below checks that), and the service unit's are systemd's own.
"""

from __future__ import annotations

import ctypes.util
import errno
import grp
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest

from htda.cache.union.base import mount_type
from htda.cache.union.mergerfs import MergerfsDriver
from testkit.fakes import PeerStandIn
from testkit.nodes import SECRET, NodeProcess, free_port, wait_until, write_config
from tests.users import ensure_user, run_as

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
OPERATIONS = REPO / "docs" / "operations.rst"
INSTALLED_BINARY = "/usr/bin/htda-node"
#: the bounding set the cache unit shipped with before mergerfs could act as its callers (issue 12)
OLD_CACHE_BOUNDING_SET = "CAP_SYS_ADMIN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_CHOWN CAP_FOWNER CAP_SYS_PTRACE"
#: settings for which systemd gives a unit a mount namespace of its own, from which no mount reaches the host
#: (systemd v252 src/core/execute.c, exec_needs_mount_namespace; systemd.exec(5), PrivateMounts=)
MOUNT_NAMESPACE_SETTINGS = ("ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts",
                            "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
                            "ProtectControlGroups", "ProtectProc", "ProcSubset", "PrivateIPC", "ReadWritePaths",
                            "ReadOnlyPaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths", "BindPaths",
                            "BindReadOnlyPaths", "TemporaryFileSystem", "MountImages", "ExtensionImages",
                            "ExtensionDirectories", "RootImage", "RootDirectory", "MountFlags", "LogNamespace",
                            "NetworkNamespacePath", "IPCNamespacePath")

IS_ROOT = os.geteuid() == 0
HAS_FUSE = os.path.exists("/dev/fuse") and shutil.which("mergerfs") is not None
HAS_SECCOMP = ctypes.util.find_library("seccomp") is not None
needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze missing (apt-get install systemd)")
needs_sandbox = pytest.mark.skipif(not (IS_ROOT and HAS_FUSE and HAS_SECCOMP and shutil.which("setpriv")
                                        and shutil.which("systemd-analyze")),
                                   reason="needs root, /dev/fuse, mergerfs, libseccomp, setpriv, systemd-analyze")


# -- reading units ---------------------------------------------------------------------------------------------------
def service_settings(text: str) -> dict[str, list[str]]:
    """The ``[Service]`` section's settings: key -> its values in order (a key may repeat)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def unit(name: str) -> dict[str, list[str]]:
    return service_settings((UNITS / name).read_text())


def bounding_set(settings: dict[str, list[str]]) -> list[str]:
    """Capabilities of ``CapabilityBoundingSet=`` (an empty assignment resets the list, as systemd reads it)."""
    caps: list[str] = []
    for value in settings.get("CapabilityBoundingSet", []):
        caps = caps + value.split() if value else []
    return caps


@cache
def syscall_groups() -> dict[str, list[str]]:
    """systemd's system-call groups, as this systemd resolves them (``systemd-analyze syscall-filter``)."""
    out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"], capture_output=True, text=True,
                         check=True).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif current is not None and line.startswith("    ") and not line.strip().startswith("#"):
            current.append(line.strip())
        elif not line.strip():
            current = None
    return groups


def expand(names: list[str]) -> set[str]:
    """System-call names, groups (``@...``) expanded recursively."""
    out: set[str] = set()
    for name in names:
        out |= expand(syscall_groups()[name]) if name.startswith("@") else {name}
    return out


def allowed_syscalls(settings: dict[str, list[str]]) -> set[str]:
    """The allow list ``SystemCallFilter=`` lines build: the first line lists what is allowed (with @default, as
    systemd adds it), each later ``~`` line takes its calls out again."""
    lines = settings.get("SystemCallFilter", [])
    assert lines and not lines[0].startswith("~"), "expected an allow list first"
    allowed = expand(["@default", *lines[0].split()])
    for line in lines[1:]:
        names = line.lstrip("~").split()
        allowed = allowed - expand(names) if line.startswith("~") else allowed | expand(names)
    return allowed


def exposure(template: str, unit_dir: Path) -> float:
    instance = template.replace("@.", "@site.")
    result = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", instance],
                            cwd=unit_dir, capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout + result.stderr)
    assert match, result.stdout[-500:] + result.stderr[-500:]
    return float(match.group(1))


def documented_exposure(template: str) -> float:
    """The score docs/operations.rst states for ``template`` (a line of its exposure table)."""
    match = re.search(rf"^``{re.escape(template)}``\s+([0-9.]+)\s", OPERATIONS.read_text(), re.M)
    assert match, f"docs/operations.rst has no exposure line for {template}"
    return float(match.group(1))


# -- the sandbox ------------------------------------------------------------------------------------------------------
#: Loads the filters systemd would, then execs argv.  Run by setpriv (bounding set, user, no new privileges).
#: Arguments: a JSON spec, then the command.  Rules follow systemd v252 src/shared/seccomp-util.c.
LAUNCHER = r"""
import ctypes, json, os, sys
spec = json.loads(sys.argv[1])
lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_init.argtypes = [ctypes.c_uint32]
lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
lib.seccomp_load.argtypes = [ctypes.c_void_p]
lib.seccomp_release.argtypes = [ctypes.c_void_p]

class Cmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]

lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                       ctypes.POINTER(Cmp)]
ALLOW, NE, LT, LE, EQ, GE, GT, MASKED_EQ = 0x7fff0000, 1, 2, 3, 4, 5, 6, 7
errno_action = lambda n: 0x00050000 | (n & 0xffff)

def nr(name):
    return lib.seccomp_syscall_resolve_name(name.encode())

def rule(ctx, action, name, *cmps):
    number = nr(name)
    if number < 0:
        return  # not a system call of this architecture
    array = (Cmp * max(len(cmps), 1))(*[Cmp(*c) for c in cmps])
    rc = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), array)
    assert rc == 0, (name, cmps, rc)

def load(ctx):
    assert lib.seccomp_load(ctx) == 0, "seccomp_load failed"
    lib.seccomp_release(ctx)

# the argument filters first: the allow list below has no seccomp() for loading more
ctx = lib.seccomp_init(ALLOW)
families = sorted(spec["families"])  # RestrictAddressFamilies=: socket() of any other family
if families:
    rule(ctx, errno_action(97), "socket", (0, LT, families[0], 0))
    rule(ctx, errno_action(97), "socket", (0, GT, families[-1], 0))
    for family in range(families[0], families[-1]):
        if family not in families:
            rule(ctx, errno_action(97), "socket", (0, EQ, family, 0))
if spec["restrict_namespaces"]:  # RestrictNamespaces=true: no CLONE_NEW* at all
    rule(ctx, errno_action(1), "setns")
    for bit in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x80):
        rule(ctx, errno_action(1), "unshare", (0, MASKED_EQ, bit, bit))
        rule(ctx, errno_action(1), "clone", (0, MASKED_EQ, bit, bit))
    rule(ctx, errno_action(38), "clone3")  # its flags are out of reach: glibc falls back to clone()
if spec["restrict_suid_sgid"]:  # RestrictSUIDSGID=true: no mode with S_ISUID or S_ISGID
    for bit in (0o4000, 0o2000):
        for name, arg in (("chmod", 1), ("fchmod", 1), ("fchmodat", 2), ("mkdir", 1), ("mkdirat", 2),
                          ("mknod", 1), ("mknodat", 2), ("creat", 1)):
            rule(ctx, errno_action(1), name, (arg, MASKED_EQ, bit, bit))
        rule(ctx, errno_action(1), "open", (1, MASKED_EQ, 0o100, 0o100), (2, MASKED_EQ, bit, bit))
        rule(ctx, errno_action(1), "openat", (2, MASKED_EQ, 0o100, 0o100), (3, MASKED_EQ, bit, bit))
if spec["mdwe"]:  # MemoryDenyWriteExecute=true
    rule(ctx, errno_action(1), "mmap", (2, MASKED_EQ, 0x6, 0x6))
    rule(ctx, errno_action(1), "mprotect", (2, MASKED_EQ, 0x4, 0x4))
    rule(ctx, errno_action(1), "pkey_mprotect", (2, MASKED_EQ, 0x4, 0x4))
    rule(ctx, errno_action(1), "shmat", (2, MASKED_EQ, 0o100000, 0o100000))
load(ctx)
# SystemCallFilter=: any other call fails with SystemCallErrorNumber=, or kills the process (systemd's default)
ctx = lib.seccomp_init(errno_action(spec["errno"]) if spec["errno"] else 0x80000000)
for name in spec["allow"]:
    rule(ctx, ALLOW, name)
load(ctx)
os.execvp(sys.argv[2], sys.argv[2:])
"""

FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16}
#: DevicePolicy=closed: the standard pseudo devices (char major:minor), systemd src/core/cgroup.c
CLOSED_DEVICES = ["c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm", "c 5:0 rwm", "c 5:2 rwm",
                  "c 136:* rw"]
DEVICE_CGROUPS = Path("/sys/fs/cgroup/devices")


class Sandbox:
    """What a unit's ``[Service]`` settings do to its processes, rebuilt outside systemd (see the module doc)."""

    def __init__(self, settings: dict[str, list[str]]):
        self.settings = settings
        self.cgroup: Path | None = None
        self.python, self.env = interpreter_for(settings.get("User", [""])[-1])

    def _flag(self, key: str) -> bool:
        return self.settings.get(key, ["false"])[-1] in ("true", "yes", "1")

    def spec(self) -> dict:
        errno_name = self.settings.get("SystemCallErrorNumber", [""])[-1]
        families = self.settings.get("RestrictAddressFamilies", [""])[-1].split()
        return {"allow": sorted(allowed_syscalls(self.settings)), "errno": getattr(errno, errno_name, 0),
                "families": [FAMILIES[f] for f in families], "restrict_namespaces": self._flag("RestrictNamespaces"),
                "restrict_suid_sgid": self._flag("RestrictSUIDSGID"), "mdwe": self._flag("MemoryDenyWriteExecute")}

    def argv(self, command: list[str]) -> list[str]:
        caps = ",".join(["-all", *(f"+{c.lower().removeprefix('cap_')}" for c in bounding_set(self.settings))])
        user = self.settings.get("User", [""])[-1]
        as_user = []
        if user:
            entry = pwd.getpwnam(user)
            as_user = [f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups"]
        nnp = ["--no-new-privs"] if self._flag("NoNewPrivileges") else []
        launcher = [self.python, "-c", LAUNCHER, json.dumps(self.spec())] if "SystemCallFilter" in self.settings \
            else []
        return ["setpriv", f"--bounding-set={caps}", "--inh-caps=-all", *as_user, *nnp, "--", *launcher, *command]

    def devices(self) -> Path | None:
        """A device cgroup with ``DevicePolicy=closed`` plus ``DeviceAllow=`` (cgroup v1), or None if the unit
        has no device policy or this machine no v1 device controller."""
        if "DevicePolicy" not in self.settings or not (DEVICE_CGROUPS / "devices.allow").exists():
            return None
        if self.cgroup is not None:
            return self.cgroup
        self.cgroup = Path(tempfile.mkdtemp(prefix="htda-unit-", dir=DEVICE_CGROUPS))
        (self.cgroup / "devices.deny").write_text("a")
        allow = list(CLOSED_DEVICES)
        for value in self.settings.get("DeviceAllow", []):
            path, _, access = value.partition(" ")
            if path.startswith("/dev/"):
                st = os.stat(path)
                allow.append(f"c {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} {access or 'rwm'}")
        for line in allow:
            (self.cgroup / "devices.allow").write_text(line)
        return self.cgroup

    def popen(self, command: list[str], **kwargs) -> subprocess.Popen:
        cgroup = self.devices()
        preexec = None
        if cgroup is not None:
            procs = str(cgroup / "cgroup.procs")

            def preexec():  # the child joins the device cgroup before it execs anything
                with open(procs, "w") as fh:
                    fh.write(str(os.getpid()))
        kwargs["env"] = {**kwargs.get("env", os.environ), **self.env}
        return subprocess.Popen(self.argv(command), preexec_fn=preexec, **kwargs)

    def cleanup(self) -> None:
        """Remove the device cgroup once its last process (mergerfs, after the unmount) has left."""
        if self.cgroup is None:
            return

        def removed() -> bool:
            try:
                self.cgroup.rmdir()
            except OSError:
                return False
            return True

        try:
            wait_until(removed, timeout=10, what=f"{self.cgroup} empty")
        except TimeoutError:
            pass  # left behind empty-able: nothing holds a device open through it


def interpreter_for(user: str) -> tuple[str, dict[str, str]]:
    """A Python ``user`` may run with this checkout and its packages: this one, or (when it lives where the user
    cannot reach, e.g. under /root) the system's of the same version with the packages on PYTHONPATH."""
    if not user:
        return sys.executable, {}
    entry = pwd.getpwnam(user)
    # through a shell: setpriv's own exec of a path the user cannot reach is not a fair test of it
    probe = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", "--", "sh", "-c",
             'exec "$@"', "sh"]
    if subprocess.run([*probe, sys.executable, "-c", "import htda"], capture_output=True).returncode == 0:
        return sys.executable, {}
    system = shutil.which("python3", path="/usr/bin:/bin")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if system and subprocess.run([system, "-c", "import sys; print(sys.version)"], capture_output=True,
                                 text=True).stdout.startswith(version):
        paths = [str(REPO), *(p for p in sys.path if p.endswith("site-packages"))]
        env = {"PYTHONPATH": os.pathsep.join(paths)}
        if subprocess.run([*probe, system, "-c", "import htda, cherrypy"], capture_output=True,
                          env={**os.environ, **env}).returncode == 0:
            return system, env
    pytest.skip(f"no Python with this checkout's packages that the {user} user may run")


class SandboxedNode(NodeProcess):
    """``htda-node`` started inside a unit's :class:`Sandbox`."""

    def __init__(self, config: Path, sandbox: Sandbox):
        super().__init__(config)
        self.sandbox = sandbox

    def start(self, wait: bool = True) -> "SandboxedNode":
        with open(self.log, "ab") as logfile:
            command = [self.sandbox.python, "-m", "htda.node.daemon", "--config", str(self.config)]
            self.proc = self.sandbox.popen(command,
                                           stdout=logfile, stderr=subprocess.STDOUT, cwd=self.config.parent,
                                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if wait:
            wait_until(self._healthy, timeout=40, what=f"node {self.name} to answer /healthz (log: {self.log})")
        return self


#: tries what the cache unit forbids; prints the errno names it met
PROBE = r"""
import ctypes, errno, json, mmap, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "allowed"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
def call(rc):
    if rc < 0:
        raise OSError(ctypes.get_errno(), "")
attempt("sched_setaffinity", lambda: os.sched_setaffinity(0, {0}))
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))
attempt("unshare", lambda: call(libc.unshare(0x00020000)))
attempt("wx_mapping", lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC))
attempt("setuid_bit", lambda: os.chmod(sys.argv[1], 0o4755))
attempt("process_vm_readv", lambda: call(libc.process_vm_readv(os.getpid(), None, 0, None, 0, 0)))
attempt("device", lambda: open(sys.argv[2], "rb"))
print(json.dumps(out))
"""


def process_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def cap_mask(caps: list[str]) -> int:
    numbers = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_SETGID": 6,
               "CAP_SETUID": 7, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21}
    return sum(1 << numbers[c] for c in caps)


# -- fixtures ----------------------------------------------------------------------------------------------------------
@pytest.fixture
def unit_dir(tmp_path: Path) -> Path:
    """The units with ExecStart pointing at this environment's htda-node (verify checks it is executable)."""
    # the environment running the tests (a venv's bin is not always on PATH), then PATH
    binary = shutil.which("htda-node", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    if binary is None:
        pytest.skip("htda-node is not installed (pip install -e .)")
    for path in UNITS.glob("*.service"):
        (tmp_path / path.name).write_text(path.read_text().replace(INSTALLED_BINARY, binary))
    return tmp_path


@pytest.fixture
def shared_dir():
    """A directory other users can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="htda-units-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def storage(shared_dir: Path, two_users) -> Path:
    """Storage with usera's writable directory and a file usera reads."""
    usera, _ = two_users
    root = shared_dir / "storage"
    (root / "home" / "usera").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "data" / "input.dat").write_bytes(b"x" * 4096)
    for path in (root, root / "home", root / "data"):
        path.chmod(0o755)
    (root / "data" / "input.dat").chmod(0o644)
    os.chown(root / "home" / "usera", usera.uid, usera.gid)
    return root


def owner(path: Path) -> str:
    return pwd.getpwuid(path.stat().st_uid).pw_name


# -- static checks -------------------------------------------------------------------------------------------------
@needs_analyze
@pytest.mark.parametrize("template", ["htda-node@.service", "htda-cache@.service"])
def test_unit_verifies_without_warnings(unit_dir: Path, template: str) -> None:
    instance = unit_dir / template.replace("@.", "@site.")
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(instance)], cwd=unit_dir,
                            capture_output=True, text=True, timeout=60)
    # verify exits 0 on unknown keys and bad values but prints them: any output is a failure.
    assert result.returncode == 0 and not result.stderr.strip() and not result.stdout.strip(), result.stderr


@needs_analyze
def test_verify_catches_a_broken_unit(unit_dir: Path) -> None:
    """The check above can fail: a typo in a key is reported."""
    broken = unit_dir / "broken@.service"
    broken.write_text((unit_dir / "htda-node@.service").read_text().replace("Restart=", "Restrat="))
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit_dir / "broken@site.service")],
                            cwd=unit_dir, capture_output=True, text=True, timeout=60)
    assert "Restrat" in result.stderr


@needs_analyze
def test_exposure_stays_within_what_the_docs_state(unit_dir: Path) -> None:
    """The service roles score 4.0 or better; each unit scores no worse than docs/operations.rst says."""
    assert exposure("htda-node@.service", unit_dir) <= min(4.0, documented_exposure("htda-node@.service"))
    assert exposure("htda-cache@.service", unit_dir) <= documented_exposure("htda-cache@.service")


@pytest.mark.parametrize("template", ["htda-node@.service", "htda-cache@.service"])
def test_unit_contract(template: str) -> None:
    """Type=notify (the daemon sends READY=1), restart on failure, one config per instance."""
    text = (UNITS / template).read_text()
    for line in ("Type=notify", "Restart=on-failure", "NoNewPrivileges=true",
                 f"ExecStart={INSTALLED_BINARY} --config /etc/htda/%i.toml"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), line


def test_service_roles_get_a_read_only_system_and_no_capabilities() -> None:
    settings = unit("htda-node@.service")
    assert settings["ProtectSystem"] == ["strict"] and settings["ReadWritePaths"] == ["/var/lib/htda"]
    assert bounding_set(settings) == [] and settings["User"] == ["htda"]
    assert "PrivateUsers" not in settings  # the submit agent must see its callers' real uids


def test_the_cache_unit_holds_only_the_capabilities_it_uses() -> None:
    """No CAP_SYS_PTRACE (fanotify replaced the /proc scan); CAP_SETUID/CAP_SETGID for mergerfs."""
    caps = bounding_set(unit("htda-cache@.service"))
    assert sorted(caps) == sorted(["CAP_SYS_ADMIN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_CHOWN",
                                   "CAP_FOWNER", "CAP_SETUID", "CAP_SETGID"])
    assert unit("htda-cache@.service")["AmbientCapabilities"] == [""]


def test_the_cache_unit_gets_no_mount_namespace() -> None:
    """Any of these would put the daemon in a mount namespace of its own: the view it mounts would be invisible
    to the jobs (the old unit had ProtectKernelTunables, -Modules, -Logs and ProtectControlGroups)."""
    settings = unit("htda-cache@.service")
    assert [key for key in MOUNT_NAMESPACE_SETTINGS if key in settings] == []
    assert "PrivateTmp" in unit("htda-node@.service")  # the list names real settings


@needs_analyze
def test_the_cache_filter_allows_what_mounting_and_fanotify_need_and_not_ptrace() -> None:
    allowed = allowed_syscalls(unit("htda-cache@.service"))
    assert {"mount", "umount2", "fanotify_init", "fanotify_mark", "setfsuid", "setgroups", "fchown"} <= allowed
    assert not {"ptrace", "process_vm_readv", "kexec_load", "init_module", "reboot", "swapon"} & allowed
    assert not {"ptrace", "mount", "fanotify_init", "setuid"} & allowed_syscalls(unit("htda-node@.service"))
    for template in ("htda-cache@.service", "htda-node@.service"):  # numpy's import binds its buffers' memory
        assert "mbind" in allowed_syscalls(unit(template)) and "setpriority" not in allowed_syscalls(unit(template))


# -- the daemons under their units ---------------------------------------------------------------------------------
def mount_view_under(caps: str, storage: Path, base: Path) -> Path:
    """The mergerfs view the cache driver mounts, mounted by a process holding exactly ``caps`` in its bounding
    set (mergerfs, its child, inherits it as it would under the unit)."""
    branch, view = base / "branch", base / "view"
    branch.mkdir()
    branch.chmod(0o755)
    start = ("from htda.cache.union.mergerfs import MergerfsDriver; import sys; "
             "MergerfsDriver(sys.argv[1], [sys.argv[2]], sys.argv[3], sys.argv[4], {}).start([])")
    argv = Sandbox({"CapabilityBoundingSet": [caps]}).argv([sys.executable, "-c", start, str(view), str(branch),
                                                            str(storage), str(base)])
    subprocess.run(argv, check=True, timeout=60)
    assert mount_type(str(view)) == "fuse.mergerfs"
    return view


def written_through(view: Path, storage: Path, user) -> tuple[str | None, str | None]:
    """``user`` writes a file and makes a directory through the view: their owners in storage (None: refused)."""
    run_as(user, ["sh", "-c", f"echo result > {view}/home/usera/out.txt; mkdir {view}/home/usera/d"])
    return tuple(owner(p) if p.exists() else None for p in (storage / "home/usera/out.txt",
                                                            storage / "home/usera/d"))


@needs_sandbox
def test_a_file_a_job_writes_through_the_view_is_the_jobs(storage, shared_dir, two_users):
    """Under the unit's bounding set mergerfs creates files as the caller."""
    usera, _ = two_users
    view = mount_view_under(" ".join(bounding_set(unit("htda-cache@.service"))), storage, shared_dir)
    try:
        assert written_through(view, storage, usera) == ("usera", "usera")
    finally:
        MergerfsDriver(str(view), [], str(storage), str(shared_dir)).teardown()


@needs_sandbox
def test_under_the_old_bounding_set_a_job_could_not_write_as_itself(storage, shared_dir, two_users):
    """The check above tells the sets apart: without CAP_SETUID/CAP_SETGID mergerfs can only create as root (the
    driver then mounts storage read-only, so the write is refused instead)."""
    usera, _ = two_users
    view = mount_view_under(OLD_CACHE_BOUNDING_SET, storage, shared_dir)
    try:
        assert set(written_through(view, storage, usera)) <= {"root", None}
    finally:
        MergerfsDriver(str(view), [], str(storage), str(shared_dir)).teardown()


def forbidden(sandbox: Sandbox, base: Path) -> dict[str, str]:
    """What :data:`PROBE` met inside ``sandbox``."""
    target = base / "probe-target"
    target.write_text("")
    device = base / "loop-control"  # a device outside any policy here (its open works, or says ENXIO)
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(10, 237))
    probe = sandbox.popen([sandbox.python, "-c", PROBE, str(target), str(device)], stdout=subprocess.PIPE, text=True)
    out, _ = probe.communicate(timeout=60)
    return json.loads(out)


@needs_sandbox
def test_the_probe_does_all_of_that_outside_the_sandbox(shared_dir):
    """The control for the probe the cache test runs: with the same capabilities and nothing else, it may."""
    caps = " ".join(bounding_set(unit("htda-cache@.service")))
    assert set(forbidden(Sandbox({"CapabilityBoundingSet": [caps]}), shared_dir).values()) == {"allowed"}


def worker_config(base: Path, peer: PeerStandIn, storage: Path) -> Path:
    port = free_port()
    device = base / "dev0"
    return write_config(base / "etc", "worker", ["cache"], port, [f"http://127.0.0.1:{port}"], sections={
        "cache": {"storage": "posix", "storage_location": str(storage), "devices": [{"path": str(device)}],
                  "coordinators": [peer.url], "locators": [peer.url], "union": "mergerfs",
                  "view": str(base / "view"), "cycle": 0.3, "retry_delay": 0.1, "report_reads": True}})


@needs_sandbox
def test_the_cache_daemon_works_inside_the_cache_units_sandbox(storage, shared_dir, two_users):
    """The real cache daemon inside the unit's bounding set, system-call filter, memory, namespace, SUID and device
    restrictions: it mounts the view, stages a copy, files usera writes through the view are usera's, and what
    usera reads from storage is reported (fanotify, without CAP_SYS_PTRACE)."""
    usera, _ = two_users
    settings = unit("htda-cache@.service")
    sandbox = Sandbox(settings)
    peer = PeerStandIn(SECRET.encode()).start()
    node = SandboxedNode(worker_config(shared_dir, peer, storage), sandbox)
    view = shared_dir / "view"
    try:
        peer.assign([("/data/input.dat", 1.0)])
        node.start()
        status = process_status(node.proc.pid)
        assert int(status["CapBnd"], 16) == cap_mask(bounding_set(settings))
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"
        assert mount_type(str(view)) == "fuse.mergerfs"
        assert forbidden(sandbox, shared_dir) == {
            "sched_setaffinity": "EPERM", "netlink": "EAFNOSUPPORT", "unshare": "EPERM", "wx_mapping": "EPERM",
            "setuid_bit": "EPERM", "process_vm_readv": "EPERM", "device": "EPERM"}  # the sandbox is in force
        wait_until(lambda: (shared_dir / "dev0/data/data/input.dat").exists(), timeout=30, what="the copy staged")

        result = run_as(usera, ["sh", "-c", f"echo result > {view}/home/usera/out.txt"])
        assert result.returncode == 0, result.stderr
        assert owner(storage / "home/usera/out.txt") == "usera"

        peer.assign([("/data/input.dat", 1.0), ("/home/usera/out.txt", 0.5)])
        reader = subprocess.Popen(["setpriv", f"--reuid={usera.uid}", f"--regid={usera.gid}", "--clear-groups",
                                   "--bounding-set=-all", "--", sys.executable, "-c",
                                   "import sys; f = open(sys.argv[1], 'rb'); print(flush=True); sys.stdin.read()",
                                   f"{view}/home/usera/out.txt"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            reader.stdout.readline()
            wait_until(lambda: any("/home/usera/out.txt" in r["lfns"] for r in peer.reads), timeout=15,
                       what="usera's read from storage reported")
        finally:
            reader.stdin.close()
            reader.wait(10)
        assert "seen with fanotify" in node.log.read_text()
    finally:
        node.stop()
        peer.stop()
        if mount_type(str(view)):
            MergerfsDriver(str(view), [], str(storage), str(shared_dir)).teardown()
        sandbox.cleanup()


@needs_sandbox
def test_the_service_roles_work_inside_the_node_units_sandbox(shared_dir):
    """Coordinator, locator and dashboard as the htda user with no capabilities, the unit's filter and
    MemoryDenyWriteExecute: the node starts, serves and takes a signed job report."""
    settings = unit("htda-node@.service")
    ensure_user(settings["User"][0])
    entry = pwd.getpwnam(settings["User"][0])
    port = free_port()
    config = write_config(shared_dir / "etc", "service", ["coordinator", "locator", "dashboard"], port,
                          [f"http://127.0.0.1:{port}"])
    for path in [config.parent, *config.parent.rglob("*")]:
        os.chown(path, entry.pw_uid, entry.pw_gid)
    node = SandboxedNode(config, Sandbox(settings))
    try:
        node.start()
        status = process_status(node.proc.pid)
        assert int(status["CapBnd"], 16) == 0 and status["Seccomp"] == "2"
        assert status["Uid"].split()[0] == str(entry.pw_uid)
        job = {"job_id": "sandboxed-1", "owner": "usera", "inputs": ["/store/a.root"]}
        node.post("/api/v1/coordinator/jobs", {"jobs": [job]})
        node.post("/api/v1/coordinator/cycle", {})
        assert node.get("/api/v1/coordinator/files/store/a.root")["lfn"] == "/store/a.root"
    finally:
        node.stop()


# -- tmpfiles and sysusers -----------------------------------------------------------------------------------------
@pytest.mark.skipif(not (IS_ROOT and shutil.which("systemd-tmpfiles") and shutil.which("systemd-sysusers")),
                    reason="needs root, systemd-tmpfiles and systemd-sysusers")
def test_tmpfiles_make_the_hooks_settings_readable_and_keep_the_secret(shared_dir, two_users):
    """Applied to a scratch root: every user reads /etc/htda/hooks.toml, nobody but htda the pool secret; the
    agent's socket directory is htda's and writable by no one else (what the hooks check); jobs can pass through
    /var/lib/htda but not list it."""
    usera, _ = two_users
    root = shared_dir / "root"
    (root / "etc").mkdir(parents=True)
    for name in ("passwd", "group"):
        shutil.copy(f"/etc/{name}", root / "etc" / name)
    subprocess.run(["systemd-sysusers", f"--root={root}", str(UNITS / "htda.sysusers")], check=True, timeout=60)
    tmpfiles = ["systemd-tmpfiles", "--create", f"--root={root}", str(UNITS / "htda.tmpfiles")]
    subprocess.run(tmpfiles, check=True, timeout=60)
    (root / "etc/htda/hooks.toml").write_text('node = "http://127.0.0.1:8740"\n')
    (root / "etc/htda/pool.secret").write_text("s3cret\n")
    for path in (root / "etc/htda/hooks.toml", root / "etc/htda/pool.secret"):
        path.chmod(0o600)  # as an editor or a careless install might leave them
    subprocess.run(tmpfiles, check=True, timeout=60)  # the "z" lines put the modes right

    htda = next(line.split(":") for line in (root / "etc/passwd").read_text().splitlines()
                if line.startswith("htda:"))
    assert run_as(usera, ["cat", f"{root}/etc/htda/hooks.toml"]).returncode == 0
    assert run_as(usera, ["cat", f"{root}/etc/htda/pool.secret"]).returncode != 0
    secret = (root / "etc/htda/pool.secret").stat()
    assert (secret.st_mode & 0o777, secret.st_uid) == (0o600, int(htda[2]))

    run = (root / "run/htda").stat()
    assert run.st_uid in (0, int(htda[2])) and not run.st_mode & 0o022
    assert run.st_mode & 0o777 == int(unit("htda-node@.service")["RuntimeDirectoryMode"][0], 8)
    assert run_as(usera, ["ls", f"{root}/var/lib/htda"]).returncode != 0  # no listing
    (root / "var/lib/htda/worker").mkdir(mode=0o711)
    assert run_as(usera, ["stat", f"{root}/var/lib/htda/worker"]).returncode == 0  # but passing through
    assert int(unit("htda-node@.service")["StateDirectoryMode"][0], 8) == (root / "var/lib/htda").stat().st_mode & 0o777
    assert grp.getgrgid((root / "etc/htda").stat().st_gid).gr_name == "root"
