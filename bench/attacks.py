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
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.attack_pool import AttackPool  # noqa: E402
from htda.node.client import ClientError  # noqa: E402


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
    status = pool.anonymous_status("worker", "GET", "/api/v1/cache/files")
    return Outcome("a job on the worker lists cached files unsigned", "401 or 403", f"HTTP {status}",
                   status in (401, 403))


# -- the network ---------------------------------------------------------------------------------------
@attack("unsigned-bodies")
def unsigned_bodies(pool: AttackPool) -> Outcome:
    """Four unsigned 250 MB POSTs: the answer must come before the body is read, and memory stays flat."""
    before = pool.rss_mb("service")
    answers = [pool.unsigned_upload("service", "/api/v1/coordinator/jobs", 250 << 20) for _ in range(4)]
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
