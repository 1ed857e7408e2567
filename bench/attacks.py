"""Replay the security review's attacks against a live pool: one line each, attack, expected, observed.

Run as root (it creates the ordinary accounts ``usera`` and ``userb``, mounts
the worker's mergerfs view and starts the worker under the cache unit's own
capability bounding set)::

    sudo .venv/bin/python bench/attacks.py            # every attack
    sudo .venv/bin/python bench/attacks.py --list     # their names
    sudo .venv/bin/python bench/attacks.py --only unsigned-bodies half-open

The pool is a service node (coordinator, locator, submit agent) and a worker
(cache, mergerfs view over a POSIX storage directory) on loopback ports.  The
bench exits 1 if any attack was not refused (or a check that must still work
stopped working), so it doubles as an end-to-end security test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.attack_pool import AttackPool, hook_input, job_ad  # noqa: E402
from htda.node.client import ClientError  # noqa: E402
from htda.protocol import paths  # noqa: E402
from testkit.nodes import wait_until  # noqa: E402


@dataclass
class Outcome:
    """One attack's line."""

    attack: str
    expected: str
    observed: str
    refused: bool
    control: bool = False  # a check that must still work (not an attack): WORKS or BROKEN


Attack = Callable[[AttackPool], Outcome]
ATTACKS: dict[str, Attack] = {}


def attack(name: str) -> Callable[[Attack], Attack]:
    def register(fn: Attack) -> Attack:
        ATTACKS[name] = fn
        return fn
    return register


# -- copies and the view ------------------------------------------------------------------------------
@attack("copy-of-private-file")
def copy_of_private_file(pool: AttackPool) -> Outcome:
    """usera names userb's 0600 file in a job; once it is cached, usera tries every path to it."""
    lfn = "/private/secret.txt"
    held = pool.stage_for("usera", lfn)
    tries = {
        "view": pool.as_user("usera", ["cat", str(pool.view / lfn.lstrip("/"))]),
        "device": pool.as_user("usera", ["cat", str(pool.device_copy(lfn))]),
        "list view dir": pool.as_user("usera", ["ls", str(pool.view / "private")]),
        "list device dir": pool.as_user("usera", ["ls", str(pool.device_copy(lfn).parent)]),
        "list staging": pool.as_user("usera", ["ls", str(pool.staging_dir())]),
    }
    leaked = [where for where, result in tries.items() if result.returncode == 0]
    owner = pool.owner_and_mode(pool.device_copy(lfn)) if held else "not staged"
    observed = f"copy {owner}; " + ("read/listed via " + ", ".join(leaked) if leaked else "every path denied")
    return Outcome("usera reads userb's 0600 file after naming it in a job", "denied on every path (copy keeps "
                   "userb:userb 0600)", observed, held and not leaked)


@attack("own-file-still-readable")
def own_file_still_readable(pool: AttackPool) -> Outcome:
    """The other side of the rule: what usera may read in storage it still reads through the view."""
    lfn = "/public/usera-data.txt"
    held = pool.stage_for("usera", lfn)
    result = pool.as_user("usera", ["cat", str(pool.view / lfn.lstrip("/"))])
    ok = held and result.returncode == 0 and result.stdout == pool.contents[lfn]
    return Outcome("usera reads its own cached file through the view", "read, same bytes",
                   f"{'cached, ' if held else 'not cached, '}" + ("read, same bytes" if ok else
                                                                 f"rc {result.returncode}: {result.stderr.strip()}"),
                   ok, control=True)


@attack("write-through-view")
def write_through_view(pool: AttackPool) -> Outcome:
    """A job's write through the mergerfs view must land in storage as the job's user, not root."""
    target = pool.view / "home" / "usera" / f"out-{os.getpid()}.txt"
    result = pool.as_user("usera", ["sh", "-c", f"echo result > '{target}'"])
    landed = pool.storage / "home" / "usera" / target.name
    owner = pool.owner_and_mode(landed) if landed.exists() else f"not written (rc {result.returncode}: " \
                                                                  f"{result.stderr.strip()})"
    return Outcome("usera writes a file through the mergerfs view (worker under the unit's capabilities)",
                   "file in storage owned by usera", f"file {owner}", owner.startswith("usera:usera"))


@attack("cache-listing-unsigned")
def cache_listing_unsigned(pool: AttackPool) -> Outcome:
    """A job on the worker asks the worker's node which files it caches (names, checksums) without signing."""
    status = pool.anonymous_status("worker", "GET", paths.CACHE_FILES)
    return Outcome("a job on the worker lists cached files unsigned", "401 or 403", f"HTTP {status}",
                   status in (401, 403))


# -- the hooks and the submit agent -------------------------------------------------------------------------
SQUATTER = """
import socketserver, sys
ad = sys.argv[2].encode()
class Answer(socketserver.StreamRequestHandler):
    def handle(self):
        self.request.recv(1 << 20)
        self.wfile.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(ad) + ad)
socketserver.UnixStreamServer(sys.argv[1], Answer).serve_forever()
"""


@attack("hook-squatter")
def hook_squatter(pool: AttackPool) -> Outcome:
    """usera tries to take the agent's place and answer userb's translate hook with usera's command."""
    made = pool.as_user("usera", [sys.executable, "-c", "import socket; socket.socket(socket.AF_UNIX)"
                                  f".bind({str(pool.run_dir / 'squat.sock')!r})"])
    own_dir = pool.base / "usera-run"
    own_dir.mkdir()
    os.chown(own_dir, pool.users["usera"].uid, pool.users["usera"].gid)
    own_dir.chmod(0o755)
    evil = job_ad("userb", Cmd='"/home/usera/evil"', Args='"steal"')
    server = subprocess.Popen(["setpriv", f"--reuid={pool.users['usera'].uid}", f"--regid={pool.users['usera'].gid}",
                               "--clear-groups", "--", sys.executable, "-c", SQUATTER, str(own_dir / "s.sock"), evil])
    try:
        wait_until(lambda: (own_dir / "s.sock").exists(), what="the squatter's socket")
        settings = pool.hook_settings(own_dir / "s.sock", "squatted")
        original = job_ad("userb")
        printed = {variant: pool.hook("userb", variant, "htda_translate", hook_input(original), settings)[1]
                   for variant in ("python", "native")}
    finally:
        server.kill()
        server.wait()
    unchanged = [v for v, out in printed.items() if out == original.encode()]
    ok = made.returncode != 0 and len(unchanged) == 2
    return Outcome("usera serves a socket to answer userb's translate hook with usera's Cmd",
                   "usera cannot create a socket beside the agent's; both hooks ignore a usera socket",
                   f"bind beside the agent: {'denied' if made.returncode else 'ALLOWED'}; job unchanged from "
                   f"{', '.join(unchanged) or 'no'} hook(s)", ok)


@attack("forged-owner")
def forged_owner(pool: AttackPool) -> Outcome:
    """usera reports userb's job removed through the agent (the cleanup hook with userb's ad)."""
    before = pool.agent_metric("htda_submit_events_total", hook="cleanup", state="removed")
    ad = job_ad("userb", JobStatus="3")
    status, _ = pool.hook("usera", "python", "htda_job_cleanup", hook_input(ad))
    refused = pool.agent_metric("htda_submit_events_total", hook="cleanup", state="refused")
    after = pool.agent_metric("htda_submit_events_total", hook="cleanup", state="removed")
    return Outcome("usera's cleanup hook reports userb's job removed", "agent refuses (caller's uid is not the owner)",
                   f"hook exit {status}; agent: {refused:.0f} refused, {after - before:.0f} removal(s) taken",
                   refused >= 1 and after == before)


@attack("huge-ad-twice")
def huge_ad_twice(pool: AttackPool) -> Outcome:
    """An ad over max_ad_bytes whose reader drains stdout only after the hook's deadline."""
    ad = job_ad("usera", Huge='"' + "x" * (2 << 20) + '"')
    copies = {variant: pool.hook("usera", variant, "htda_translate", hook_input(ad), read_after=1.0)[1].count(b"Huge =")
              for variant in ("python", "native")}
    return Outcome("a 2 MB ad, stdout drained after the deadline", "printed exactly once by both hooks",
                   ", ".join(f"{v}: {n} copies" for v, n in copies.items()), set(copies.values()) == {1})


@attack("many-inputs")
def many_inputs(pool: AttackPool) -> Outcome:
    """Jobs naming 10,000 and 40,000 inputs: mapping must stay linear (CPU time), or such jobs are never steered."""
    from htda.condor import classads
    from htda.condor.jobinfo import InputMapping

    def cpu_seconds(n: int) -> float:
        names = ",".join(f"/store/data/f{i}.root" for i in range(n))
        ad = classads.parse_job(job_ad("usera", HTDA_InputFiles=f'"{names}"'))
        started = time.process_time()
        assert len(InputMapping("HTDA_InputFiles", {}).lfns(ad)) == n
        return time.process_time() - started

    small, large = min(cpu_seconds(10_000) for _ in range(3)), min(cpu_seconds(40_000) for _ in range(3))
    ratio = large / max(small, 1e-6)
    return Outcome("jobs with 10,000 and 40,000 inputs", "linear: 4x the inputs < 6x the CPU (quadratic: 16x)",
                   f"10,000 in {small * 1000:.1f} ms CPU, 40,000 in {large * 1000:.1f} ms: {ratio:.1f}x", ratio < 6)


@attack("hostile-names")
def hostile_names(pool: AttackPool) -> Outcome:
    """'my file.dat' as an input, and a newline inside a string attribute, through the installed hooks."""
    from htda.condor import classads
    from htda.condor.jobinfo import InputMapping

    ad = job_ad("usera", HTDA_InputFiles='"my file.dat, /public/usera-data.txt"', Note='"line1\\nCmd = evil"')
    original = classads.parse_job(ad)
    lfns = InputMapping("HTDA_InputFiles", {}).lfns(original)
    pool.stage_for("usera", "/public/usera-data.txt")
    kept = {}
    for variant in ("python", "native"):
        _, out = pool.hook("usera", variant, "htda_translate", hook_input(ad))
        reparsed = classads.parse_job(out.decode())
        kept[variant] = (classads.evaluate(reparsed, "Note") == classads.evaluate(original, "Note")
                         and classads.evaluate(reparsed, "Cmd") == "/bin/analysis" and b"HTDA_" in out)
    ok = lfns == ["/tmp/my file.dat", "/public/usera-data.txt"] and all(kept.values())
    return Outcome("input 'my file.dat'; a newline inside a string attribute", "one LFN per entry; steered ad "
                   "re-parses with Note and Cmd as they were", f"LFNs {lfns}; " + ", ".join(
                       f"{v}: {'kept' if k else 'CHANGED'}" for v, k in kept.items()), ok)


@attack("hook-as-other-user")
def hook_as_other_user(pool: AttackPool) -> Outcome:
    """Hooks installed by install-hooks run as every job owner (interpreter and package readable by all)."""
    pool.stage_for("usera", "/public/usera-data.txt")  # so the locator has a holder to steer to
    ad = job_ad("usera")
    results = {v: pool.hook("usera", v, "htda_translate", hook_input(ad)) for v in ("python", "native")}
    steered = {v: out != ad.encode() and out.startswith(b"Args") for v, (code, out) in results.items()}
    ok = all(code == 0 for code, _ in results.values()) and all(steered.values())
    return Outcome("usera runs the installed translate hooks against the live agent", "they run and steer",
                   ", ".join(f"{v}: exit {c}, {'steered' if steered[v] else 'unchanged'}" for v, (c, _) in
                             results.items()), ok, control=True)


# -- the network ---------------------------------------------------------------------------------------
@attack("unsigned-bodies")
def unsigned_bodies(pool: AttackPool) -> Outcome:
    """Four unsigned 250 MB POSTs: the answer must come before the body is read, and memory stays flat."""
    before = pool.rss_mb("service")
    answers = [pool.unsigned_upload("service", paths.JOBS, 250 << 20) for _ in range(4)]
    after = pool.rss_mb("service")
    statuses = sorted({status for status, _ in answers})
    sent = max(sent for _, sent in answers) / (1 << 20)
    grew = after - before
    return Outcome("4 unsigned 250 MB POSTs to the coordinator", "401 before reading, RSS +<20 MB",
                   f"HTTP {statuses}, at most {sent:.1f} MB sent, RSS {before:.0f} -> {after:.0f} MB",
                   statuses == [401] and grew < 20)


@attack("half-open")
def half_open(pool: AttackPool) -> Outcome:
    """400 connections that send part of a request and stall; /healthz and the pool must not notice."""
    with pool.half_open_connections("service", 400) as opened:
        latencies = [pool.healthz_seconds("service") for _ in range(10)]
        time.sleep(pool.expiry + 1)  # long enough for a starved seed to drop the worker
        try:
            members = pool.members("service")
        except ClientError:
            members = set()  # the seed did not answer its member list either
        latencies += [pool.healthz_seconds("service") for _ in range(5)]
    worst = max(latencies)
    kept = "worker" in members
    return Outcome(f"{opened} half-open connections to the service node",
                   "/healthz < 1 s, no member dropped",
                   f"/healthz max {worst * 1000:.0f} ms, worker {'still a member' if kept else 'DROPPED'}",
                   worst < 1.0 and kept)


@attack("replay-to-other-node")
def replay_to_other_node(pool: AttackPool) -> Outcome:
    """A request signed for the worker is sent, unchanged, to the service node within the replay window."""
    from htda.node.auth import Signer
    from testkit.nodes import SECRET

    body = b'{"lfns": ["/x"], "pin": true}'
    header = Signer(SECRET.encode()).for_url("POST", pool.url("worker") + paths.PINS, body)
    status = pool.raw_status("service", "POST", paths.PINS, body, header)
    return Outcome("a request signed for the worker, replayed to the service node", "401",
                   f"HTTP {status}", status == 401)


@attack("any-ca-certificate")
def any_ca_certificate(pool: AttackPool) -> Outcome:
    """With tls.verify_clients: a certificate the site's CA issued to some other service, not a pool member."""
    from htda.node.client import Client, ClientError
    from testkit.certs import make_ca, make_cert

    pki = pool.base / "pki"
    pki.mkdir()
    ca = make_ca(pki)
    for name in ("seed", "admin", "webserver"):
        make_cert(pki, name, ca)
    node = pool.start_tls_node(pki, allowed=["cn:seed", "cn:admin"])
    beat = {"name": "intruder", "url": "https://127.0.0.1:9", "roles": [], "version": "t", "started": 1.0}
    seen = {}
    for name in ("webserver", "admin"):
        client = Client(None, retries=0, ca_file=str(pki / "ca.pem"), client_cert=str(pki / f"{name}.pem"),
                        client_key=str(pki / f"{name}.key"))
        try:
            client.post(node.url + paths.HEARTBEAT, beat, timeout=5)
            seen[name] = "member"
        except ClientError as exc:
            seen[name] = f"refused ({type(exc).__name__})"
        finally:
            client.close()
    ok = seen["webserver"].startswith("refused") and seen["admin"] == "member"
    return Outcome("a CA-issued certificate not on tls.allowed_clients joins the pool",
                   "refused; a listed certificate is a member", f"webserver: {seen['webserver']}, admin: "
                   f"{seen['admin']}", ok)


@attack("unit-privileges")
def unit_privileges(pool: AttackPool) -> Outcome:
    """What the shipped units grant: no CAP_SYS_PTRACE for the cache role; systemd's own exposure scores."""
    from bench.attack_pool import unit_bounding_set

    caps = unit_bounding_set()
    scores = {unit: pool.exposure(unit) for unit in ("htda-node@.service", "htda-cache@.service")}
    ok = "sys_ptrace" not in caps and scores["htda-node@.service"] <= 4.0
    return Outcome("privileges of the shipped units", "cache: no CAP_SYS_PTRACE; htda-node@ <= 4.0",
                   f"cache caps {','.join(caps)}; scores " + ", ".join(f"{u} {s:.1f}" for u, s in scores.items()),
                   ok)


@attack("hooks-settings-readable")
def hooks_settings_readable(pool: AttackPool) -> Outcome:
    """Under the shipped tmpfiles rules, every user's hooks can read their settings; nobody the pool secret."""
    root = pool.scratch_root()
    hooks = pool.as_user("usera", ["cat", str(root / "etc/htda/hooks.toml")])
    secret = pool.as_user("usera", ["cat", str(root / "etc/htda/pool.secret")])
    ok = hooks.returncode == 0 and secret.returncode != 0
    return Outcome("usera's hook reads /etc/htda/hooks.toml (tmpfiles applied to a scratch root)",
                   "hooks.toml readable, pool.secret not", f"hooks.toml {'read' if hooks.returncode == 0 else 'DENIED'}"
                   f", pool.secret {'denied' if secret.returncode else 'READ'}", ok)


# -- HTCondor configuration ----------------------------------------------------------------------------------
@attack("preemption-by-affinity")
def preemption_by_affinity(pool: AttackPool) -> Outcome:
    """A job whose inputs sit on a claimed slot's node: the shipped PRE_JOB_RANK must still prefer an idle slot."""
    claimed_holder = pool.pre_job_rank(affinity=1.0, claimed=True)
    idle_other = pool.pre_job_rank(affinity=0.0, claimed=False)
    idle_holder = pool.pre_job_rank(affinity=1.0, claimed=False)
    near = pool.pre_job_rank(affinity=1.0, claimed=False, memory=2004)
    ok = idle_other > claimed_holder and idle_holder > idle_other and near != idle_holder
    return Outcome("NEGOTIATOR_PRE_JOB_RANK: claimed holder vs idle non-holder (float32, as the negotiator)",
                   "idle non-holder > claimed holder; idle holder first; 4 MB apart not tied",
                   f"claimed holder {claimed_holder:,.0f}, idle non-holder {idle_other:,.0f}, idle holder "
                   f"{idle_holder:,.0f}, +4 MB {near:,.0f}", ok)


@attack("global-hook-keyword")
def global_hook_keyword(pool: AttackPool) -> Outcome:
    """A site with its own router hooks installs HTDA's snippet: the site's keyword must survive."""
    keyword = pool.condor_val("JOB_ROUTER_HOOK_KEYWORD", site="JOB_ROUTER_HOOK_KEYWORD = SITE\n")
    return Outcome("HTDA's submit snippet after a site's JOB_ROUTER_HOOK_KEYWORD = SITE",
                   "keyword stays SITE (HTDA tags only its own jobs)", f"keyword {keyword}", keyword == "SITE")


@attack("hooks-in-flight")
def hooks_in_flight(pool: AttackPool) -> Outcome:
    """The router starts a hook per candidate per poll: the route must bound them."""
    limit = pool.condor_val("HTDA_ROUTE_MAX_JOBS")
    bounded = limit is not None and limit.isdigit() and int(limit) <= 100
    return Outcome("a burst of jobs: hooks started per router poll", "bounded (<= 100 on the shipped route)",
                   f"route MaxJobs/MaxIdleJobs {limit}", bounded)


# -- running --------------------------------------------------------------------------------------------
def run(names: list[str]) -> list[Outcome]:
    outcomes = []
    with AttackPool.started() as pool:
        for name in names:
            try:
                outcome = ATTACKS[name](pool)
            except Exception as exc:  # noqa: BLE001 - one broken attack must not hide the others
                outcome = Outcome(name, "refused", f"bench error: {type(exc).__name__}: {exc}", False)
            outcomes.append(outcome)
            print(_line(outcome), flush=True)
    return outcomes


def _line(outcome: Outcome) -> str:
    if outcome.control:
        verdict = "WORKS" if outcome.refused else "BROKEN"
    else:
        verdict = "REFUSED" if outcome.refused else "NOT REFUSED"
    return f"{verdict:<12} {outcome.attack} | expected: {outcome.expected} | observed: {outcome.observed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(ATTACKS), help="run only these attacks")
    parser.add_argument("--list", action="store_true", help="list the attacks and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(ATTACKS))
        return 0
    if os.geteuid() != 0:
        print("attacks.py: run as root (it creates accounts, mounts a view, shapes capabilities)", file=sys.stderr)
        return 2
    outcomes = run(args.only or list(ATTACKS))
    failed = [o for o in outcomes if not o.refused]
    attacks = [o for o in outcomes if not o.control]
    print(f"{sum(o.refused for o in attacks)} of {len(attacks)} attacks refused; "
          f"{sum(o.refused for o in outcomes if o.control)} of {len(outcomes) - len(attacks)} checks still work")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
