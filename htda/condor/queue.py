"""The schedd's queue of steered jobs, as first-read homes weigh it: which node each idle or running job waits for.

With the shipped route, which edits jobs in place, no lifecycle hook tells the
submit agent that a job started or ended (``docs/htcondor.rst``), so the jobs
it routed would count towards their nodes' load until ``home_timeout`` runs
out, long after they finished (:mod:`htda.condor.homes`).  The schedd knows:
``condor_q`` of the jobs HTDA routed that are idle or running gives, per job,
the nodes it was steered to (``HTDA_PreferredNodes``) or the node it runs on.
The agent reads it every ``queue_interval`` seconds while it has jobs counted,
off the hooks' path, and :meth:`~htda.condor.homes.Homes.reconcile` keeps
exactly those (and the ones routed since the read began).
"""

from __future__ import annotations

from .jobinfo import node_of_host
from .tool import CondorTool

__all__ = ["ScheddQueue", "parse_queue", "CONSTRAINT", "ATTRIBUTES"]

#: the jobs HTDA's route has handled that are idle (1) or running (2)
CONSTRAINT = "HTDA_Routed =?= true && (JobStatus == 1 || JobStatus == 2)"
#: what is read of each: its id, its state, where it was steered, where it runs
ATTRIBUTES = ("GlobalJobId", "JobStatus", "HTDA_PreferredNodes", "MachineAttrHTDA_NodeName0", "RemoteHost")


def parse_queue(text: str) -> dict[str, dict[str, float]]:
    """Job id (``<schedd>#<cluster>.<proc>``, as :func:`~htda.condor.jobinfo.job_ids` names it) -> {node: share}
    from ``condor_q -af:t`` lines of :data:`ATTRIBUTES`: a running job is all on its node, an idle one shared
    among the nodes it was steered to; an idle job steered nowhere, and lines that are not of this shape, are
    left out."""
    queue: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != len(ATTRIBUTES):
            continue
        global_id, status, preferred, node, host = (f.strip() for f in fields)
        parts = global_id.split("#")
        if len(parts) < 2 or not parts[0] or not parts[1]:
            continue
        job_id = f"{parts[0]}#{parts[1]}"
        if status == "2":
            where = node if _defined(node) else node_of_host(host) if _defined(host) else ""
            if where:
                queue[job_id] = {where: 1.0}
        elif status == "1" and _defined(preferred):
            nodes = [n for n in dict.fromkeys(preferred.split(",")) if n]
            if nodes:
                queue[job_id] = dict.fromkeys(nodes, 1.0 / len(nodes))
    return queue


def _defined(value: str) -> bool:
    return bool(value) and value != "undefined"


class ScheddQueue:
    """Reads the steered jobs of the schedd with ``tool`` (``condor_q``)."""

    def __init__(self, tool: CondorTool):
        self.tool = tool

    def read(self) -> dict[str, dict[str, float]] | None:
        """The steered jobs now (see :func:`parse_queue`); None when the tool is off or fails."""
        out = self.tool.run("-allusers", "-constraint", CONSTRAINT, "-af:t", *ATTRIBUTES)
        return None if out is None else parse_queue(out)
