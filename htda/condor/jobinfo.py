"""What HTDA needs to know of a job, read from its ad: id, owner, inputs as LFNs, cpus, memory."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from ..lfn import normalize_lfn
from . import classads
from .machine_ad import NODE_ATTR

__all__ = ["InputMapping", "JobInfo", "job_info", "job_owner", "job_state", "node_of_host"]

_URL_MARK = "://"

#: where the schedd copies the machine's HTDA node name (machine_ad.NODE_ATTR) in the job ad when
#: JobMachineAttrs lists it
NODE_MACHINE_ATTR = "MachineAttr" + NODE_ATTR


@dataclass
class InputMapping:
    """How input names in a job ad become LFNs.

    ``attribute`` (e.g. ``HTDA_InputFiles``) lists LFNs or paths; without it
    ``TransferInput`` is used.  Both are comma-separated lists, as HTCondor
    reads ``transfer_input_files``: blanks around an entry are dropped, blanks
    inside it are part of the name (``my file.dat``); relative entries are
    relative to the job's ``Iwd``.  ``prefixes`` maps
    a path or URL prefix to an LFN prefix (longest match wins).  An entry of
    ``attribute`` that no prefix maps is taken as an LFN; one of
    ``TransferInput`` is skipped (it is the user's own file, not shared data).
    """

    attribute: str = "HTDA_InputFiles"
    prefixes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._ordered = sorted(self.prefixes.items(), key=lambda item: len(item[0]), reverse=True)

    def lfns(self, ad: classads.ClassAd) -> list[str]:
        declared = classads.evaluate(ad, self.attribute)
        source, keep_unmapped = (declared, True) if isinstance(declared, str) and declared.strip() else (
            classads.evaluate(ad, "TransferInput"), False)
        if not isinstance(source, str):
            return []
        iwd = classads.evaluate(ad, "Iwd", "/")
        iwd = iwd if isinstance(iwd, str) else "/"
        out: dict[str, None] = {}  # ordered and O(1) per lookup: jobs with 10,000s of inputs exist
        for entry in source.split(","):
            entry = entry.strip()
            lfn = self._map(entry, iwd, keep_unmapped) if entry else None
            if lfn is not None:
                out.setdefault(lfn)
        return list(out)

    def _map(self, entry: str, iwd: str, keep_unmapped: bool) -> str | None:
        path = entry if entry.startswith("/") or _URL_MARK in entry else posixpath.join(iwd, entry)
        for prefix, lfn_prefix in self._ordered:
            if path.startswith(prefix):
                return _valid(lfn_prefix.rstrip("/") + "/" + path[len(prefix):])
        if keep_unmapped and _URL_MARK not in path:
            return _valid(path)
        return None


def _valid(candidate: str) -> str | None:
    try:
        return normalize_lfn(candidate)
    except ValueError:
        return None


@dataclass
class JobInfo:
    """A job as the coordinator's ``POST /jobs`` wants it."""

    job_id: str
    owner: str
    inputs: list[str]
    task: str
    cpus: int | None = None
    memory: int | None = None
    submit_time: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job_id": self.job_id, "owner": self.owner, "inputs": self.inputs, "task": self.task}
        for key in ("cpus", "memory", "submit_time"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


def job_ids(ad: classads.ClassAd) -> tuple[str, str]:
    """(job id, task id), the same for a job and its routed copy: ``<schedd>#<cluster>.<proc>``."""
    global_id = classads.evaluate(ad, "GlobalJobId", "")
    schedd = global_id.split("#", 1)[0] if isinstance(global_id, str) and "#" in global_id else "local"
    source = classads.evaluate(ad, "RoutedFromJobId")
    if isinstance(source, str) and "." in source:
        cluster, proc = source.split(".", 1)
    else:
        cluster, proc = classads.evaluate(ad, "ClusterId", 0), classads.evaluate(ad, "ProcId", 0)
    return f"{schedd}#{cluster}.{proc}", f"{schedd}#{cluster}"


def job_owner(ad: classads.ClassAd) -> str:
    """The job's owner as the coordinator records it: ``Owner``, else ``User``."""
    return str(classads.evaluate(ad, "Owner") or classads.evaluate(ad, "User") or "")


def job_info(ad: classads.ClassAd, mapping: InputMapping) -> JobInfo:
    """Everything the coordinator is told about a job; expressions are evaluated."""
    job_id, task = job_ids(ad)
    owner = job_owner(ad)
    return JobInfo(job_id=job_id, owner=owner, inputs=mapping.lfns(ad), task=task,
                   cpus=_whole(classads.evaluate(ad, "RequestCpus")),
                   memory=_whole(classads.evaluate(ad, "RequestMemory")),
                   submit_time=_number(classads.evaluate(ad, "QDate")))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _whole(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number >= 0 else None


#: HTCondor's JobStatus codes -> the coordinator's event states
_STATES = {2: "started", 3: "removed", 4: "finished", 6: "started"}


def job_state(ad: classads.ClassAd) -> tuple[str | None, str | None]:
    """(event state or None, execute node or None) from a job ad's ``JobStatus`` and remote host."""
    state = _STATES.get(classads.evaluate(ad, "JobStatus"))
    # The translate hook adds HTDA_NodeName to JobMachineAttrs, so the schedd copies the
    # machine's HTDA name into MachineAttrHTDA_NodeName0; the host name is the fallback.
    node = classads.evaluate(ad, NODE_MACHINE_ATTR + "0")
    if isinstance(node, str) and node:
        return state, node
    host = classads.evaluate(ad, "RemoteHost") or classads.evaluate(ad, "LastRemoteHost")
    if isinstance(host, str) and host:
        return state, node_of_host(host)
    return state, None


def node_of_host(remote_host: str) -> str:
    """The node a job runs on, from its ``RemoteHost``: ``slot1_2@node.example.org`` -> ``node``."""
    return remote_host.rsplit("@", 1)[-1].split(".", 1)[0]
