"""The shipped HTCondor snippets (config/htcondor/*.config) as HTCondor 25.x's own tools read them.

``condor_config_val`` parses the configuration, ``condor_transform_ads`` applies the schedd's job
transform and the route's transform to sample job ads, and ``condor_job_router_info`` runs the job
router's own route loading and candidate matching (no daemon needed); ``classad2`` then evaluates
the resulting ads.  The router picks a job's hooks like JobRouterHookMgr::getHookKeyword: the job's
``HookKeyword`` if it evaluates to a string, else ``JOB_ROUTER_HOOK_KEYWORD``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import classad2
import pytest

from tests.htcondor_home import INSTALL_HINT, condor_tool

from .kit import ROOT, job_ad, parse

SNIPPETS = sorted((ROOT / "config" / "htcondor").glob("*.config"))
#: a site's own job router set-up, before HTDA's: its own hook keyword and an overflow route for
#: vanilla jobs that lets HTDA see them first (docs/htcondor.rst)
SITE = """\
JOB_ROUTER_HOOK_KEYWORD = SITE
SITE_HOOK_TRANSLATE_JOB = /usr/libexec/site/translate
JOB_ROUTER_ROUTE_NAMES = OVERFLOW
JOB_ROUTER_ROUTE_OVERFLOW @=rt
  REQUIREMENTS JobUniverse == 5 && HookKeyword =!= "HTDA"
  UNIVERSE VANILLA
  EditJobInPlace = true
  SET Overflowed true
@rt
"""


class Condor:
    """HTCondor's tools with a minimal CONDOR_CONFIG that reads ``config.d/`` (the snippets)."""

    def __init__(self, root: Path, bindir: Path):
        self.root, self.bindir = root, bindir
        self.config_dir = root / "config.d"
        self.config_dir.mkdir()
        for sub in ("log", "spool", "lock", "run", "execute"):
            (root / "local" / sub).mkdir(parents=True)
        (root / "condor_config").write_text(
            f"RELEASE_DIR = {bindir.parent}\nLOCAL_DIR = {root / 'local'}\nLOCAL_CONFIG_DIR = {self.config_dir}\n")

    def add(self, name: str, text: str) -> None:
        (self.config_dir / name).write_text(text)

    def run(self, tool: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
        env = {"CONDOR_CONFIG": str(self.root / "condor_config"), "PATH": "/usr/bin:/bin"}
        return subprocess.run([str(self.bindir / tool), *args], env=env, capture_output=True, text=True,
                              input=stdin, timeout=60, cwd=self.root)

    def val(self, knob: str) -> str | None:
        proc = self.run("condor_config_val", knob)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def transform(self, ads: list[str], *how: str) -> list[classad2.ClassAd]:
        """``condor_transform_ads <how> -`` on ``ads`` (old format); the transformed ads."""
        proc = self.run("condor_transform_ads", *how, "-", stdin="\n".join(ads))
        assert "ERROR" not in proc.stderr.upper(), proc.stderr
        return [parse(text) for text in proc.stdout.split("\n\n") if text.strip()]

    def candidates(self, ads: list[str]) -> dict[str, str]:
        """The job router's candidate jobs among ``ads`` in one poll: {job id: route}."""
        proc = self.run("condor_job_router_info", "-diagnostic", "-match-jobs", "-jobads", "-", stdin="\n".join(ads))
        assert proc.returncode == 0, proc.stderr
        found = dict(re.findall(r"Found candidate job src=(\S+),route=(\S+)", proc.stdout))
        assert f"{len(found)} candidate jobs found" in proc.stdout, proc.stdout[-2000:]
        return found


@pytest.fixture
def condor(tmp_path) -> Condor:
    tool = condor_tool("condor_config_val")
    if tool is None:
        pytest.skip(INSTALL_HINT)
    return Condor(tmp_path, tool.parent)


def htda(condor: Condor, site: str | None = None) -> Condor:
    """``condor`` configured with every shipped snippet, after a site's own file when given."""
    if site is not None:
        condor.add("10-site.config", site)
    for snippet in SNIPPETS:
        condor.add(snippet.name, snippet.read_text())
    return condor


def hook_keyword(job: classad2.ClassAd, default: str | None) -> str | None:
    value = job.eval("HookKeyword") if "HookKeyword" in job else None
    return value if isinstance(value, str) else default


def jobs(*changes: dict[str, str]) -> list[str]:
    """Sample job ads 4711.0, 4711.1, ... with per-job ``changes``."""
    return [job_ad(ProcId=str(n), **change) for n, change in enumerate(changes)]


# -- parsing ------------------------------------------------------------------------------------------


def test_every_snippet_parses_and_sets_its_knobs(condor):
    condor.add("99-broken.config", "JOB_ROUTER_ROUTE_X @=rt\n  UNIVERSE VANILLA\n")
    assert condor.run("condor_config_val", "DAEMON_LIST").returncode != 0  # the tool does catch errors
    (condor.config_dir / "99-broken.config").unlink()
    for snippet in SNIPPETS:
        for old in condor.config_dir.iterdir():
            old.unlink()
        condor.add(snippet.name, snippet.read_text())
        proc = condor.run("condor_config_val", "-config")
        assert proc.returncode == 0 and snippet.name in proc.stdout, proc.stderr
        knobs = re.findall(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*(?:=|@=)", snippet.read_text(), re.MULTILINE)
        assert knobs
        for knob in knobs:
            proc = condor.run("condor_config_val", "-verbose", knob)
            assert proc.returncode == 0 and snippet.name in proc.stdout, (knob, proc.stdout, proc.stderr)


def test_the_negotiator_reads_the_expression_the_tests_evaluate(condor):
    from .test_negotiator import shipped_pre_job_rank

    assert htda(condor).val("NEGOTIATOR_PRE_JOB_RANK") == shipped_pre_job_rank()
    classad2.ExprTree(shipped_pre_job_rank())  # HTCondor's ClassAd parser takes it


def test_the_router_loads_the_route(condor):
    proc = htda(condor).run("condor_job_router_info", "-config")
    assert proc.returncode == 0, proc.stderr
    assert 'Name         : "HTDA"' in proc.stdout
    assert re.search(r"MaxJobs\s*:\s*50\n", proc.stdout) and re.search(r"MaxIdleJobs\s*:\s*50\n", proc.stdout)
    assert "ERROR" not in proc.stdout + proc.stderr and "disabled" not in proc.stderr


# -- item 6: HTDA's hooks for HTDA's route only ----------------------------------------------------------


def test_htda_leaves_the_sites_hook_keyword_alone(condor):
    assert htda(condor).val("JOB_ROUTER_HOOK_KEYWORD") is None
    condor.add("99-site.config", "JOB_ROUTER_HOOK_KEYWORD = SITE\n")  # read after HTDA's
    assert condor.val("JOB_ROUTER_HOOK_KEYWORD") == "SITE"
    (condor.config_dir / "99-site.config").unlink()
    condor.add("10-site.config", "JOB_ROUTER_HOOK_KEYWORD = SITE\n")  # read before HTDA's
    assert condor.val("JOB_ROUTER_HOOK_KEYWORD") == "SITE"
    assert condor.val("JOB_ROUTER_ROUTE_NAMES") == "HTDA"


def test_submission_tags_only_the_jobs_htdas_route_is_for(condor):
    htda(condor, SITE)
    tagged, disabled, own, grid, copy = condor.transform(
        jobs({}, {"HTDA_Disable": "true"}, {"HookKeyword": '"CE"'}, {"JobUniverse": "9"},
             {"RoutedFromJobId": '"4711.0"'}), "-jobtransforms", "HTDA")
    assert hook_keyword(tagged, "SITE") == "HTDA"
    assert hook_keyword(disabled, "SITE") == "SITE"
    disabled["HTDA_Disable"] = False  # condor_qedit: the job opts in after all
    assert hook_keyword(disabled, "SITE") == "HTDA"
    assert hook_keyword(own, "SITE") == "CE"
    assert hook_keyword(grid, "SITE") == "SITE"
    assert hook_keyword(copy, "SITE") == "SITE"  # a routed copy another route submitted


def test_htdas_route_takes_tagged_jobs_and_then_hands_them_to_the_site(condor):
    htda(condor, SITE)
    site_default = condor.val("JOB_ROUTER_HOOK_KEYWORD")
    assert condor.val("JOB_ROUTER_ROUTE_NAMES") == "HTDA OVERFLOW"
    [tagged] = condor.transform(jobs({}), "-jobtransforms", "HTDA")
    untagged = job_ad(ProcId="1")
    # one poll: the tagged job goes to HTDA's route (its hooks: HTDA's), the other to the site's
    assert condor.candidates([tagged.printOld(), untagged]) == {"4711.0": "HTDA", "4711.1": "OVERFLOW"}
    # after HTDA's route (hook output, then the route's SET): the tag is gone, the site's route and
    # hooks take the job, as without HTDA
    [routed] = condor.transform([tagged.printOld()], "-jobroute", "HTDA")
    assert routed["HTDA_Routed"] is True
    assert hook_keyword(tagged, site_default) == "HTDA"
    assert hook_keyword(routed, site_default) == "SITE"
    assert condor.candidates([routed.printOld()]) == {"4711.0": "OVERFLOW"}


# -- item 7: hooks in flight --------------------------------------------------------------------------


def test_the_route_takes_at_most_htda_route_max_jobs_per_poll(condor):
    htda(condor)
    burst = condor.transform(jobs(*[{}] * 300), "-jobtransforms", "HTDA")
    found = condor.candidates([job.printOld() for job in burst])
    assert len(found) == int(condor.val("HTDA_ROUTE_MAX_JOBS")) == 50
    assert set(found.values()) == {"HTDA"}
    # a site with native hooks raises it in one place
    condor.add("99-site.config", "HTDA_ROUTE_MAX_JOBS = 200\n")
    assert len(condor.candidates([job.printOld() for job in burst])) == 200
