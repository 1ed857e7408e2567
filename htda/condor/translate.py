"""The translate hook's logic: publish the job, find where its inputs are cached, steer its Rank.

The answer lists only the attributes to set (old ClassAd format, printed by
HTCondor's code); the hook applies them to the job ad it holds
(:func:`htda.condor.hooks.apply_answer`).  Whatever goes wrong, the answer is
empty and the job goes on exactly as it came in: the job router has no
fallback for a failed hook, so failing open is the only safe failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocol.coordinator import input_key
from . import classads
from .hooks import split
from .jobinfo import InputMapping, JobInfo, job_info
from .machine_ad import GROUPS_ATTRIBUTE, NODE_ATTR

__all__ = ["Steering", "Outcome", "translate", "parse_input", "ATTRS"]


class ATTRS:
    """Names of the job attributes the translate hook writes (documented in docs/htcondor.rst)."""

    USER_RANK = "HTDA_UserRank"
    USER_REQUIREMENTS = "HTDA_UserRequirements"
    MACHINE_NODE = "HTDA_MachineNode"
    AFFINITY = "HTDA_CacheAffinity"
    PREFERRED = "HTDA_PreferredNodes"
    FRACTION = "HTDA_CachedFraction"
    INPUTS = "HTDA_InputCount"
    HOME = "HTDA_HomeNode"
    INPUT_KEY = "HTDA_InputKey"
    MACHINE_GROUPS = GROUPS_ATTRIBUTE  # the machine attribute listing the input keys its cache node holds whole


@dataclass
class Steering:
    """How the translate hook rewrites a job."""

    rank_scale: float = 1e9  # the affinity term's weight in the job's Rank (fraction 1.0 -> this much)
    max_preferred: int = 8  # preferred nodes written into the ad, best first
    min_fraction: float = 0.0  # nodes holding no more than this share are not preferred
    steer_requirements: bool = False  # also require a preferred node (off: Requirements untouched)
    steer_timeout: float = 600.0  # seconds after QDate the requirement gives way (0: never)
    home_timeout: float = 300.0  # the same for a job steered to the first-read home of its inputs
    cold_first: bool = True  # a job that reads all its inputs from storage starts before cached ones (JobPrio)
    relative_fraction: float = 0.5  # nodes holding less than this part of the best node's share are not preferred

    def rank(self) -> str:
        """The job's new ``Rank``: the affinity term, on slots that are unclaimed or claimed by the job's own
        user, plus the user's own Rank.

        The negotiator sorts a job's candidate slots by ``NEGOTIATOR_PRE_JOB_RANK``, then by the
        job's ``Rank``, and only after both by whether taking the slot preempts (matchmaker.cpp).
        Where the pre-job rank ties or a pool ranks only by the job's ``Rank``, an affinity term on
        another user's claimed slots would pick preemption on a cache node over an idle slot elsewhere;
        there (``RemoteOwner`` defined, as in HTCondor's default pre-job rank) it is therefore 0.
        On the user's own claims it stays: the negotiator never preempts a submitter for itself, and the
        schedd reuses a claim for the user's next job only if the job's ``Rank`` of the claimed slot (its
        ``RemoteOwner`` now the user) is at least that of the job that claimed it (``CurrentRank``,
        qmgmt.cpp ``FindRunnableJob``).  A term that fell to 0 there made every steered job wait for a
        negotiation cycle (``tests/htcondor/test_claim_reuse.py``).
        """
        mine = "TARGET.RemoteOwner =?= undefined || TARGET.RemoteOwner =?= MY.User"
        return (f"{float(self.rank_scale)!r} * ifThenElse({mine}, {ATTRS.AFFINITY}, 0.0)"
                f" + {classads.numeric_rank(ATTRS.USER_RANK)}")


@dataclass
class Outcome:
    """The hook's answer (the attributes to set; empty: none) and why."""

    text: bytes
    changed: bool
    reason: str
    job: JobInfo | None = None
    failed: bool = False  # unchanged because something went wrong (not by design)
    preferred: tuple[str, ...] = ()  # the holders the job was steered to (none: not steered to holders)


#: publish(job) queues the job for the coordinator; lookup(lfns) answers like POST /locator/lookup
Publish = Callable[[JobInfo], None]
Lookup = Callable[[list[str]], Any]
#: home(job) names the node that reads the job's inputs, which no node holds yet (:mod:`htda.condor.homes`), or None
Home = Callable[[JobInfo], "str | None"]

#: the affinity of a first-read home: above 0 (preferred and, with steer_requirements, required), below any
#: share a holder of real bytes gets
HOME_AFFINITY = 1e-3

#: the JobPrio of a job whose inputs no node holds, where the user left it at the default 0: such a job reads
#: everything from storage and runs longest, so starting it first shortens a batch (longest job first)
COLD_PRIO = 1


def parse_input(stdin: bytes) -> tuple[bytes, classads.ClassAd]:
    """(job ad text, parsed job ad) of a hook's input (route line, ``------``, job ad);
    :class:`~htda.condor.classads.AdError` or UnicodeDecodeError when the job ad is malformed."""
    job_bytes = split(stdin)[1]
    return job_bytes, classads.parse_job(job_bytes.decode("utf-8"))


def translate(ad: classads.ClassAd, mapping: InputMapping, steering: Steering, publish: Publish,
              lookup: Lookup, home: Home | None = None) -> Outcome:
    """Answer a translate hook for the job ``ad``: the attributes HTDA sets, or nothing.

    Holders of the inputs are preferred by their share of the bytes; when no node holds any and ``home``
    is given, the job is steered to the first-read home of its inputs (``home_timeout`` long).  In every
    case a node that comes to hold the whole input set while the job waits counts as a full holder.
    """
    job = job_info(ad, mapping)
    if not job.inputs:
        return Outcome(b"", False, "the job names no inputs", job)
    publish(job)
    try:
        fractions = _preferred(lookup(job.inputs), steering)
        first_read = None if fractions or home is None else home(job)
    except Exception as exc:  # noqa: BLE001 - any failure of the pool or its answer: fail open
        return Outcome(b"", False, f"locator lookup failed: {exc}", job, failed=True)
    if fractions:
        written = _steer(ad, fractions, fractions[0][1], steering.steer_timeout, job.inputs, steering)
        reason = f"preferred {fractions[0][0]} ({fractions[0][1]:.0%})"
    elif first_read:
        written = _steer(ad, [(first_read, HOME_AFFINITY)], 0.0, steering.home_timeout, job.inputs, steering)
        ad[ATTRS.HOME] = first_read
        written.append(ATTRS.HOME)
        if steering.cold_first and classads.evaluate(ad, "JobPrio", 0) == 0:
            ad["JobPrio"] = COLD_PRIO
            written.append("JobPrio")
        reason = f"no holder: first-read home {first_read}"
    else:  # nothing to prefer yet: the job follows the copies made while it waits
        written = _steer(ad, [], 0.0, 0.0, job.inputs, steering, require=False)
        reason = "no holder yet: follows copies made later"
    try:
        text = classads.print_attributes(ad, written)
    except classads.AdError as exc:
        return Outcome(b"", False, f"not printable: {exc}", job, failed=True)
    return Outcome(text.encode(), True, reason, job, preferred=tuple(node for node, _ in fractions))


def _preferred(answer: Any, steering: Steering) -> list[tuple[str, float]]:
    """[(node, fraction)] best first, from a lookup answer; ValueError if the answer is malformed."""
    nodes = answer.get("nodes") if isinstance(answer, dict) else None
    if not isinstance(nodes, dict):
        raise ValueError(f"the answer has no 'nodes' object: {str(answer)[:80]!r}")
    out = []
    for node, facts in nodes.items():
        fraction = facts.get("fraction") if isinstance(facts, dict) else None
        if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not math.isfinite(fraction):
            raise ValueError(f"node {str(node)[:40]!r} has no numeric fraction")
        if not isinstance(node, str) or not node or '"' in node or "\\" in node or not node.isprintable():
            raise ValueError(f"bad node name {str(node)[:40]!r}")
        if fraction > steering.min_fraction:
            out.append((node, min(float(fraction), 1.0)))
    out.sort(key=lambda item: (-item[1], item[0]))
    # a node with a sliver of the inputs (a replica half copied, one file of a group) would make the job read
    # the rest from storage: it is neither preferred nor, with steer_requirements, accepted
    floor = out[0][1] * steering.relative_fraction if out else 0.0
    return [item for item in out if item[1] >= floor][:steering.max_preferred]


def _steer(ad: classads.ClassAd, fractions: list[tuple[str, float]], cached: float, timeout: float, inputs: list[str],
           steering: Steering, require: bool = True) -> list[str]:
    """Write the steering into ``ad`` (``cached``: the best node's share of the bytes; ``timeout``: how long a
    required node is waited for; ``require``: with ``steer_requirements``, require a preferred node); the names
    of the attributes written.  Besides the ``fractions`` named now, a machine whose cache node came to hold
    the job's whole input set later counts as a full holder (``HTDA_InputKey`` in its ``HTDA_CacheGroups``)."""
    written = []

    def put(name: str, value: Any) -> None:
        ad[name] = value
        written.append(name)

    if ATTRS.USER_RANK not in ad and "Rank" in ad:
        put(ATTRS.USER_RANK, ad.lookup("Rank"))  # kept once: a second pass must not wrap our own Rank
    put(ATTRS.MACHINE_NODE, classads.expr(
        f"ifThenElse(isUndefined(TARGET.{NODE_ATTR}), TARGET.Machine, TARGET.{NODE_ATTR})"))
    put(ATTRS.INPUT_KEY, input_key(inputs))
    put(ATTRS.AFFINITY, classads.expr(classads.follow_copies(
        ATTRS.INPUT_KEY, ATTRS.MACHINE_GROUPS, classads.affinity_expression(fractions, ATTRS.MACHINE_NODE))))
    put(ATTRS.PREFERRED, ",".join(node for node, _ in fractions))
    put(ATTRS.FRACTION, cached)
    put(ATTRS.INPUTS, len(inputs))
    put("Rank", classads.expr(steering.rank()))
    machine_attrs = classads.evaluate(ad, "JobMachineAttrs", "")
    names = [n for n in str(machine_attrs).replace(",", " ").split() if n]
    if NODE_ATTR.lower() not in (n.lower() for n in names):
        put("JobMachineAttrs", ",".join([*names, NODE_ATTR]))
    if require and steering.steer_requirements and ATTRS.USER_REQUIREMENTS not in ad and "Requirements" in ad:
        put(ATTRS.USER_REQUIREMENTS, ad.lookup("Requirements"))
        put("Requirements", classads.expr(f"({ATTRS.USER_REQUIREMENTS}) && {_cache_requirement(timeout)}"))
    return written


def _cache_requirement(timeout: float) -> str:
    """A preferred node is required; with a timeout, only until the job has waited that long since its QDate
    (the negotiator evaluates ``time()`` in every cycle; a job without QDate never waits)."""
    held = f"({ATTRS.AFFINITY} > 0.0)"
    if timeout <= 0:
        return held
    waited = f"ifThenElse(isUndefined(QDate), true, time() - QDate > {float(timeout)!r})"
    return f"({held} || {waited})"
