"""Only HTDA's agent answers a hook, and it answers a user only for that user's own jobs.

Real accounts (``usera`` plays the squatter, ``userb`` the victim whose job
the router hands to a hook run as ``userb``), the hooks as ``install-hooks``
writes them (Python and native), a real agent on a UNIX socket, and a fake
agent run as ``usera`` (``data/squatter.py``): every permission check here is
the kernel's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from htda.node.config import ConfigError
from testkit.nodes import wait_until
from tests.users import User, ensure_user, remove_user, run_as

from .kit import (
    DATA,
    HOOKS,
    INPUTS,
    agent_sections,
    agent_socket,
    hook_input,
    job_ad,
    parse,
    shared_dir,
    write_hook_config,
)

TIMEOUT = 2.0  # hooks started through setpriv on a loaded machine
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
#: what a squatter answers: only attributes the allow-list accepts, so only the channel's checks stop it
LURE = 'Rank = 1e12\nHTDA_PreferredNodes = "usera-node"\n'


def ad_of(owner: str, **changes: str) -> str:
    return job_ad(Owner=f'"{owner}"', **changes)


@pytest.fixture
def public():
    """A folder for this test, root's, 0755: settings files every account may read."""
    path = shared_dir("htda-channel-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def squatter(user: User, socket: Path, log: Path) -> Iterator[None]:
    """``user``'s own fake agent on ``socket``, answering :data:`LURE` and noting what it is sent in ``log``."""
    log.touch()
    os.chown(log, user.uid, user.gid)
    started = run_as(user, ["/bin/sh", "-c", 'exec "$0" "$@" </dev/null >/dev/null 2>&1 & echo $!', PYTHON,
                            str(DATA / "squatter.py"), str(socket), str(log), LURE])
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout)
    try:
        wait_until(lambda: socket.exists(), timeout=10, what=f"{user.name}'s socket")
        yield
    finally:
        os.kill(pid, signal.SIGTERM)


def assert_unchanged(run, ad: str, why: bytes) -> None:
    assert run.code == 0, run.stderr
    assert run.stdout == ad.encode()
    assert why in run.stderr, run.stderr


def test_a_user_cannot_create_the_agents_socket(two_users, installed_hooks, socket_dir, public):
    """While the agent is down the socket's path is free, but in a directory only root (htda) writes."""
    usera, userb = two_users
    path = socket_dir / "submit.sock"
    bind = run_as(usera, [PYTHON, "-c", "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])",
                          str(path)])
    assert bind.returncode != 0 and "PermissionError" in bind.stderr
    assert not path.exists()
    config = write_hook_config(public / "h.toml", str(path), timeout=TIMEOUT)
    out = installed_hooks("htda_translate", hook_input(ad_of(userb.name)), config, user=userb)
    assert_unchanged(out, ad_of(userb.name), b"left unchanged")


@pytest.mark.parametrize("directory", ["owned by usera", "writable by everyone"])
def test_a_socket_where_another_user_can_write_is_refused(two_users, installed_hooks, public, directory):
    usera, userb = two_users
    run_dir = public / "run"
    run_dir.mkdir()
    if directory == "owned by usera":
        os.chown(run_dir, usera.uid, usera.gid)
        run_dir.chmod(0o755)
    else:
        run_dir.chmod(0o1777)  # like /tmp
    sock, log = run_dir / "submit.sock", public / "sent.log"
    config = write_hook_config(public / "h.toml", str(sock), timeout=TIMEOUT)
    with squatter(usera, sock, log):
        out = installed_hooks("htda_translate", hook_input(ad_of(userb.name)), config, user=userb)
    assert_unchanged(out, ad_of(userb.name), b"left unchanged")
    assert log.read_bytes() == b""  # userb's ad never reached usera


def test_a_socket_another_user_serves_is_refused_by_its_credentials(two_users, installed_hooks, public):
    """Directory and socket file root's, the process behind them usera's: SO_PEERCRED tells, and only
    it.  The control run (usera named as the agent's account) shows that the check is what refuses."""
    usera, userb = two_users
    run_dir = public / "run"
    run_dir.mkdir()
    os.chown(run_dir, usera.uid, usera.gid)
    sock, log = run_dir / "submit.sock", public / "sent.log"
    with squatter(usera, sock, log):
        os.chown(sock, 0, 0, follow_symlinks=False)
        os.chown(run_dir, 0, 0)
        run_dir.chmod(0o755)
        config = write_hook_config(public / "h.toml", str(sock), timeout=TIMEOUT)
        out = installed_hooks("htda_translate", hook_input(ad_of(userb.name)), config, user=userb)
        assert_unchanged(out, ad_of(userb.name), f"runs as uid {usera.uid}".encode())
        assert log.read_bytes() == b""
        control = write_hook_config(public / "c.toml", str(sock), timeout=TIMEOUT, agent_user=usera.name)
        lured = installed_hooks("htda_translate", hook_input(ad_of(userb.name)), control, user=userb)
    assert parse(lured.stdout)["HTDA_PreferredNodes"] == "usera-node"
    assert log.read_bytes() != b""


def test_the_agent_answers_a_user_only_for_its_own_jobs(two_users, installed_hooks, agent, holdings, coordinator,
                                                        public):
    usera, userb = two_users
    holdings({"c-all": INPUTS})
    config = write_hook_config(public / "h.toml", agent_socket(agent), timeout=TIMEOUT)
    theirs = installed_hooks("htda_translate", hook_input(ad_of(usera.name)), config, user=userb)
    assert_unchanged(theirs, ad_of(usera.name), b"HTTP 403")
    own = installed_hooks("htda_translate", hook_input(ad_of(userb.name, ClusterId="5")), config, user=userb)
    assert parse(own.stdout)["HTDA_PreferredNodes"] == "c-all"
    wait_until(lambda: coordinator.jobs, timeout=5, what="userb's job at the coordinator")
    assert [(job["owner"], job["job_id"]) for job in coordinator.jobs] == [(userb.name, "submit.example.org#5.3")]


def test_the_condor_account_may_act_for_any_users_job(two_users, installed_hooks, agent, holdings, public):
    usera, _ = two_users
    holdings({"c-all": INPUTS})
    config = write_hook_config(public / "h.toml", agent_socket(agent), timeout=TIMEOUT)
    out = installed_hooks("htda_translate", hook_input(ad_of(usera.name)), config, user=ensure_user("condor"))
    assert parse(out.stdout)["HTDA_PreferredNodes"] == "c-all"


def test_a_trusted_account_made_after_the_agent_started_is_trusted_at_once(two_users, installed_hooks, inprocess_node,
                                                                          locator, coordinator, holdings, sockets,
                                                                          public):
    """As when HTCondor (its ``condor`` account) is installed after HTDA: no restart needed, and an
    account deleted again loses the right with its name."""
    usera, _ = two_users
    # this worker's own account: the test's variants run at once on other workers, and an account of the
    # same name made there (often with the uid just freed here) would be trusted here too
    name = f"htdalate{os.getpid()}"
    remove_user(name)
    agent = inprocess_node("late", ["submit"], seeds=[locator.url], sections=agent_sections(
        [locator.url], [coordinator.url], sockets(), trusted_users=[name]))
    holdings({"c-all": INPUTS})
    config = write_hook_config(public / "h.toml", agent_socket(agent), timeout=TIMEOUT)
    late = ensure_user(name)
    try:
        out = installed_hooks("htda_translate", hook_input(ad_of(usera.name)), config, user=late)
        assert parse(out.stdout)["HTDA_PreferredNodes"] == "c-all", out.stderr
    finally:
        remove_user(name)
    out = installed_hooks("htda_translate", hook_input(ad_of(usera.name)), config, user=late)
    assert_unchanged(out, ad_of(usera.name), b"HTTP 403")


@pytest.mark.parametrize("hook", ["htda_update_job_info", "htda_job_finalize", "htda_job_cleanup"])
def test_lifecycle_hooks_report_only_the_callers_jobs(two_users, installed_hooks, agent, coordinator, public, hook):
    usera, userb = two_users
    config = write_hook_config(public / "h.toml", agent_socket(agent), timeout=TIMEOUT)
    forged = installed_hooks(hook, ad_of(usera.name, JobStatus="3").encode(), config, user=userb)
    assert forged.code == 0 and forged.stdout == b"" and b"HTTP 403" in forged.stderr
    own = installed_hooks(hook, ad_of(userb.name, ClusterId="5", JobStatus="3").encode(), config, user=userb)
    assert own.code == 0 and own.stdout == b"", own.stderr
    wait_until(lambda: coordinator.events, timeout=5, what="userb's event at the coordinator")
    assert [(e["job_id"], e["state"]) for e in coordinator.events] == [("submit.example.org#5.3", "removed")]


def test_a_hook_says_why_when_it_cannot_read_its_settings(two_users, installed_hooks, public):
    _, userb = two_users
    config = write_hook_config(public / "h.toml", "/nonexistent/submit.sock", timeout=TIMEOUT)
    config.chmod(0o600)  # root's only: what a 0750 /etc/htda did to every hook
    out = installed_hooks("htda_translate", hook_input(ad_of(userb.name)), config, user=userb)
    assert_unchanged(out, ad_of(userb.name), b"not read")


def test_the_agent_refuses_a_socket_directory_others_may_write(inprocess_node, locator, coordinator, public):
    run_dir = public / "run"
    run_dir.mkdir()
    run_dir.chmod(0o1777)
    with pytest.raises(ConfigError, match="writable by group or others"):
        inprocess_node("open", ["submit"], sections=agent_sections([locator.url], [coordinator.url],
                                                                   str(run_dir / "submit.sock")))


def test_install_hooks_refuses_an_interpreter_other_users_cannot_run(two_users, tmp_path):
    _, userb = two_users
    if run_as(userb, [sys.executable, "-c", "pass"]).returncode == 0:
        pytest.skip(f"{sys.executable} runs for every user here")
    done = subprocess.run([sys.executable, str(HOOKS / "install-hooks"), "--python", sys.executable,
                           str(tmp_path / "hooks")], capture_output=True, text=True)
    assert done.returncode != 0 and "every user may run" in done.stderr
