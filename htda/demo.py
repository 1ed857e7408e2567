"""``htda demo``: a running pool caches and steers, within a minute, on data written for it.

Against the node that ``make run`` starts (``config/all-in-one.toml``), the
demo

1. writes a small ROOT dataset (``--datasets`` groups of ``--files`` files,
   a flat ``Events`` tree written with uproot) into the node's POSIX storage
   under ``/store/demo/``, skipping files already there;
2. submits ``--jobs`` jobs through the real submit path: the job-router
   translate hook, run as HTCondor runs it (route ad, ``------``, the job ad
   on standard input), talking to the node's submit agent on its UNIX socket;
   the popular dataset gets most jobs, as analysts rerun popular inputs;
3. asks the coordinator and the cache for a cycle now (signed with the pool
   secret) instead of waiting for their periodic ones, and waits until the
   cache holds copies;
4. prints what HTDA did: ratings, placements, staged copies, the holders of
   each file, and the ``Rank`` the hook gives a new job reading the popular
   dataset.

``htda top``, ``htda cache``, ``htda locate`` and the dashboard then show the same.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .cli import human_size

__all__ = ["add_parser"]

ROUTE = '[ Name = "HTDA"; EditJobInPlace = true; Requirements = JobUniverse == 5 && HTDA_Routed =!= true ]'
PREFIX = "/store/demo"
CLUSTER = 100  # the first dataset's jobs form cluster 100, the next 101, ...


class DemoError(ValueError):
    """The demo cannot run against this node; the message says what to change."""


def add_parser(subparsers: Any) -> None:
    """Register ``htda demo``."""
    p = subparsers.add_parser("demo", help="write a small ROOT dataset into a pool's storage, submit jobs through "
                                           "the hooks, and show what HTDA cached and how it steers")
    p.add_argument("--config", default="config/all-in-one.toml",
                   help="the running node's config: its storage, submit socket and secret (default %(default)s)")
    p.add_argument("--datasets", type=int, default=3, help="datasets (file groups) to write (default %(default)s)")
    p.add_argument("--files", type=int, default=4, help="files per dataset (default %(default)s)")
    p.add_argument("--events", type=int, default=50_000, help="events per file (default %(default)s, ~1 MB)")
    p.add_argument("--jobs", type=int, default=30, help="jobs to submit (default %(default)s)")
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for copies (default %(default)s)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> Any:
    from .node.runtime import config_dir, config_path, load_config

    config = load_config(args.config)
    base = config_dir(config["_source"])
    storage, socket, secret_file = _pool_paths(config, base, config["_source"])
    url = config["node"]["advertise_url"] or f"http://{config['node']['listen']}"
    say = _printer(args)
    say(f"writing {args.datasets} datasets of {args.files} files into {storage}{PREFIX}/")
    datasets = write_dataset(storage, args.datasets, args.files, args.events, say)
    hooks = _hooks_config(config_path(base, config["node"]["data_dir"]), socket)
    plan = job_plan(datasets, args.jobs)
    say(f"submitting {len(plan)} jobs through the translate hook ({socket})")
    steered = sum(to_holder(submit(cluster, proc, inputs, hooks)) for proc, (cluster, inputs) in enumerate(plan))
    client, cache_url = _client(secret_file), url.rstrip("/")
    copies = wait_for_copies(client, cache_url, args.wait, say)
    new_job = submit(CLUSTER, len(plan), datasets[0], hooks)
    outcome = summary(client, cache_url, datasets, len(plan), steered, copies, new_job)
    return outcome if getattr(args, "json", False) else report(outcome)


def _printer(args: argparse.Namespace):
    quiet = getattr(args, "json", False)
    return (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr, flush=True))


def _pool_paths(config: dict[str, Any], base: Path, source: str) -> tuple[Path, str, Path]:
    """The storage directory, the submit agent's socket and the pool secret of a node's config."""
    from .node.runtime import config_path

    components = config["node"]["components"]
    for needed in ("coordinator", "cache", "submit"):
        if needed not in components:
            raise DemoError(f"{source}: the demo needs a node running {needed} (node.components has "
                            f"{', '.join(components)})")
    if config["cache"]["storage"] != "posix":
        raise DemoError(f"{source}: the demo writes its files into a POSIX storage ('cache.storage' is "
                        f"{config['cache']['storage']!r})")

    if not config["cache"]["storage_location"]:
        raise DemoError(f"{source}: 'cache.storage_location' is empty: the demo needs the storage directory")
    if not config["pool"]["secret_file"]:
        raise DemoError(f"{source}: 'pool.secret_file' is empty: the demo signs its requests with the pool secret")
    return (config_path(base, config["cache"]["storage_location"]), str(config_path(base, config["submit"]["socket"])),
            config_path(base, config["pool"]["secret_file"]))


def write_dataset(storage: Path, datasets: int, files: int, events: int, say=print) -> list[list[str]]:
    """``datasets`` lists of LFNs, their files written under ``storage`` (existing ones of the right name kept)."""
    import numpy as np
    import uproot

    out = []
    for d in range(datasets):
        lfns = []
        for f in range(files):
            lfn = f"{PREFIX}/dataset{d + 1}/events_{f + 1:03d}.root"
            target = storage / lfn.lstrip("/")
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                rng = np.random.default_rng(1000 * d + f)
                partial = target.with_suffix(".part")
                with uproot.recreate(partial) as root_file:
                    root_file["Events"] = {"event": np.arange(events, dtype=np.int64),
                                           "MET_pt": rng.exponential(30.0, events).astype(np.float32),
                                           "MET_phi": rng.uniform(-3.1416, 3.1416, events).astype(np.float32),
                                           "nMuon": rng.poisson(1.6, events).astype(np.int32)}
                partial.rename(target)
                target.chmod(0o644)
            lfns.append(lfn)
        written = sum((storage / x.lstrip("/")).stat().st_size for x in lfns)
        say(f"  dataset{d + 1}: {files} files, {human_size(written)}")
        out.append(lfns)
    return out


def job_plan(datasets: list[list[str]], jobs: int) -> list[tuple[int, list[str]]]:
    """Each job's cluster (one per dataset: an analysis task) and inputs: half the jobs read the first dataset,
    the rest the others in turn (deterministic)."""
    plan = []
    for j in range(jobs):
        d = 0 if j % 2 == 0 or len(datasets) == 1 else 1 + (j // 2) % (len(datasets) - 1)
        plan.append((CLUSTER + d, datasets[d]))
    return plan


def _hooks_config(data_dir: Path, socket: str) -> Path:
    """The hooks' settings for this node: its socket, and the node's account as the agent's."""
    path = data_dir / "demo-hooks.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'socket = "{socket}"\nagent_user = "{getpass.getuser()}"\ntimeout = 2.0\n')
    path.chmod(0o644)
    return path


def _hook_program() -> list[str]:
    """The translate hook as installed (``htda_translate`` beside this interpreter, else in the checkout)."""
    beside = Path(sys.prefix) / "bin" / "htda_translate"
    found = beside if beside.is_file() else shutil.which("htda_translate")
    if found is None:
        checkout = Path(__file__).resolve().parents[1] / "hooks" / "htda_translate"
        if not checkout.is_file():
            raise DemoError("htda_translate is not installed (pip install htda puts it beside python)")
        found = checkout
    return [sys.executable, "-IS", str(found)]


def job_ad(cluster: int, proc: int, inputs: list[str]) -> str:
    """An old-syntax job ad as the schedd gives the router, owned by whoever runs the demo."""
    now = int(time.time())
    attrs = {"ClusterId": str(cluster), "ProcId": str(proc), "Owner": f'"{getpass.getuser()}"', "JobUniverse": "5",
             "JobStatus": "1", "QDate": str(now), "EnteredCurrentStatus": str(now), "Cmd": '"/bin/true"',
             "Rank": "0.0", "Requirements": "true", "MyType": '"Job"',
             "GlobalJobId": f'"demo#{cluster}.{proc}#{now}"', "HTDA_InputFiles": '"' + ",".join(inputs) + '"'}
    return "\n".join(f"{k} = {v}" for k, v in sorted(attrs.items())) + "\n"


def submit(cluster: int, proc: int, inputs: list[str], hooks: Path) -> list[str] | None:
    """Run the translate hook on one job; the lines it changed or added (``HTDA_*``, ``Rank``,
    ``Requirements``), or None if the job came back unchanged."""
    ad = job_ad(cluster, proc, inputs)
    done = subprocess.run(_hook_program(), input=f"{ROUTE}\n------\n{ad}".encode(),
                          capture_output=True, timeout=30, env={**os.environ, "HTDA_HOOKS_CONFIG": str(hooks)})
    before = set(ad.splitlines())
    changed = [line for line in done.stdout.decode().splitlines() if line not in before]
    problem = done.stderr.decode(errors="replace").strip()
    if problem:  # a hook reports trouble on stderr (HTCondor's router log): show it, the job went on unchanged
        print(f"  job {cluster}.{proc}: {problem.splitlines()[-1]}", file=sys.stderr)
    if done.returncode != 0 or not any(line.startswith("HTDA_") for line in changed):
        return None  # unchanged (the agent still recorded the job)
    return changed


def to_holder(changed: list[str] | None) -> bool:
    """Whether a job came back steered to nodes holding its inputs (not only to copies made later)."""
    return any(line.startswith("HTDA_PreferredNodes = ") and line != 'HTDA_PreferredNodes = ""'
               for line in changed or ())


def _client(secret_file: Path):
    from .node.auth import load_secret
    from .node.client import Client

    return Client(load_secret(str(secret_file)), timeout=30.0)


def wait_for_copies(client, url: str, wait: float, say=print) -> list[dict[str, Any]]:
    """Run coordinator and cache cycles until the cache holds copies (or ``wait`` seconds pass)."""
    from .protocol import cache, locator
    from .protocol.clients import CacheClient, CoordinatorClient, LocatorClient

    coordinator, copies, locate = CoordinatorClient(client, url), CacheClient(client, url), LocatorClient(client, url)
    deadline = time.monotonic() + wait
    say("asking for a placement cycle and an assignment pull now (instead of waiting for the periodic ones)")
    while True:
        coordinator.cycle(full=True)
        copies.cycle()
        files = copies.fetch(cache.FILES, query={"limit": 1000})["files"]
        if files or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    while time.monotonic() < deadline:  # let the staging in flight finish
        staging = copies.staging()
        if not staging.active and not staging.queued:
            break
        time.sleep(0.5)
    files = copies.fetch(cache.FILES, query={"limit": 1000})["files"]
    held = [f["lfn"] for f in files]
    while held and time.monotonic() < deadline:  # the cache reports its copies to the locator as it makes them
        located = locate.fetch(locator.LOOKUP, locator.LookupRequest(lfns=held))["files"]
        if all(located.get(lfn) for lfn in held):
            break
        time.sleep(0.5)
    say(f"the cache holds {len(files)} copies")
    return files


def summary(client, url: str, datasets: list[list[str]], jobs: int, steered: int, copies: list[dict[str, Any]],
            new_job: list[str] | None) -> dict[str, Any]:
    """What the pool shows after the demo (``htda demo --json``): exact numbers, the lines the hook gave."""
    from .protocol import coordinator, locator
    from .protocol.clients import CoordinatorClient, LocatorClient

    top = CoordinatorClient(client, url).fetch(coordinator.TOP_GROUPS, query={"n": 5})["groups"]
    lookup = locator.LookupRequest(lfns=[lfn for ds in datasets for lfn in ds])
    holders = LocatorClient(client, url).fetch(locator.LOOKUP, lookup)["files"]
    return {"jobs": jobs, "steered": steered, "top_groups": top,
            "copies": len(copies), "copy_bytes": sum(int(c.get("size", 0)) for c in copies),
            "datasets": [{"name": f"dataset{number}", "files": len(lfns),
                          "held": sum(bool(holders.get(lfn)) for lfn in lfns),
                          "nodes": sorted({name for lfn in lfns for name in holders.get(lfn) or []})}
                         for number, lfns in enumerate(datasets, start=1)],
            "new_job": sorted(line for line in new_job or () if not line.startswith("HTDA_Routed")) or None}


def report(outcome: dict[str, Any]) -> str:
    """The demo's :func:`summary` as a short text."""
    steering = (f"{outcome['steered']} came back steered to a holder" if outcome["steered"] else
                "none came back steered to a holder: no copy of their inputs existed yet (each follows the "
                "copies made while it waits: HTDA_InputKey)")
    lines = [f"submitted {outcome['jobs']} jobs through the translate hook (the agent recorded each for the "
             f"coordinator); {steering}",
             "best-rated groups (htda top groups):"]
    lines += [f"  {g.get('name')}: score {g.get('score', 0):.3g}, {g.get('files', '?')} files"
              for g in outcome["top_groups"]]
    lines.append(f"copies on the cache (htda cache): {outcome['copies']}, {human_size(outcome['copy_bytes'])}")
    lines += [f"  {d['name']}: {d['held']} of {d['files']} files held ({', '.join(d['nodes']) or 'nowhere'})"
              for d in outcome["datasets"]]
    if outcome["new_job"]:
        lines.append("a new job reading dataset1 comes back from the translate hook with:")
        lines += [f"  {line}" for line in outcome["new_job"]]
    else:
        lines.append("a new job reading dataset1 came back unchanged (the node's log says why)")
    return "\n".join(lines)
