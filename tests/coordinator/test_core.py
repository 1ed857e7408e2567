"""The coordinator's logic on a real database: rating from reports, cycles, restarts, departures, releases."""

from __future__ import annotations

import pytest

from htda.coordinator.core import CacheNode, Coordinator
from htda.coordinator.rating import LRFUPolicy
from htda.coordinator.store import JobRecord, Store
from htda.protocol.base import to_wire

HALF_LIFE = 100.0
NOW = 10_000.0


def _coordinator(database, **options) -> Coordinator:
    core = Coordinator(Store(*database), LRFUPolicy(half_life=HALF_LIFE), **options)
    core.load()
    return core


def _load_history(core: Coordinator, groups: int = 12, jobs_per_group: int = 3) -> None:
    """Group g has 3 files of 100 bytes; its jobs start at times that make later groups score higher."""
    jobs, events = [], []
    for g in range(groups):
        inputs = [f"/store/g{g}/f{i}" for i in range(3)]
        for j in range(jobs_per_group):
            job_id = f"g{g}-j{j}"
            jobs.append(JobRecord(job_id, "alice", inputs, task=f"task{g}", sizes=dict.fromkeys(inputs, 100)))
            events.append({"job_id": job_id, "state": "started", "time": NOW - 50.0 * (groups - g) + j})
    core.submit_jobs(jobs)
    core.report_events(events)


def _nodes(*spec: tuple[str, int]) -> list[CacheNode]:
    return [CacheNode(name, f"http://{name}", capacity) for name, capacity in spec]


def _holders(core: Coordinator) -> dict[str, str]:
    return {core.state.lfns[fid]: node for fid, node in core.placement.items()}


def test_reported_starts_give_hand_computed_scores(database):
    core = _coordinator(database)
    core.submit_jobs([JobRecord("a", "u", ["/x", "/y"]), JobRecord("b", "u", ["/y"])])
    core.report_events([{"job_id": "a", "state": "started", "time": NOW - 100.0},
                        {"job_id": "b", "state": "started", "time": NOW - 200.0}])
    # the same report again must not count
    core.report_events([{"job_id": "a", "state": "started", "time": NOW - 100.0}])
    top = {core.state.lfns[fid]: score for fid, score in core.state.top_files(10, NOW)}
    # /x: only in a's group (one access 1 half-life ago) = 0.5 ; /y: best of a's group (0.5) and b's group (0.25)
    assert top == {"/x": pytest.approx(0.5), "/y": pytest.approx(0.5)}


def test_cycles_place_the_best_groups_together_and_then_move_nothing(database):
    core = _coordinator(database)
    _load_history(core)
    first = core.run_cycle(_nodes(("n1", 700), ("n2", 700)), now=NOW)
    holders = _holders(core)
    assert first.placed == len(holders) > 0
    # capacity 700 * fill 0.95 = 665 per node: two groups of 300 bytes each
    assert len(holders) == 12
    placed_groups = {lfn.split("/")[2] for lfn in holders}
    assert placed_groups == {f"g{g}" for g in range(8, 12)}  # the four most recent groups
    for g in placed_groups:
        assert len({node for lfn, node in holders.items() if f"/{g}/" in lfn}) == 1
    for _ in range(3):
        assert core.run_cycle(_nodes(("n1", 700), ("n2", 700)), now=NOW + 1000.0).moved == 0
    assert _holders(core) == holders


def test_assignments_list_best_first_with_scores(database):
    core = _coordinator(database)
    _load_history(core)
    core.run_cycle(_nodes(("n1", 1000)), now=NOW)
    answer = core.assignments("n1", now=NOW)
    assert (answer.node, answer.cycle, answer.draining) == ("n1", 1, False)
    scores = [f.score for f in answer.files]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    assert {f.size for f in answer.files} == {100}
    assert core.assignments("nobody").files == []


def test_a_restarted_coordinator_hands_out_the_same_assignments(database):
    core = _coordinator(database)
    _load_history(core)
    nodes = _nodes(("n1", 700), ("n2", 500))
    core.run_cycle(nodes, now=NOW)
    before = {n.name: core.assignments(n.name, now=NOW) for n in nodes}
    core.store.close()
    again = _coordinator(database)
    assert again.run_cycle(nodes, now=NOW).moved == 0
    after = {n.name: again.assignments(n.name, now=NOW) for n in nodes}
    for name in before:
        assert [f.lfn for f in after[name].files] == [f.lfn for f in before[name].files]
        assert [f.score for f in after[name].files] == pytest.approx([f.score for f in before[name].files])
    assert after["n1"].cycle == before["n1"].cycle + 1


def test_files_of_a_departed_node_are_placed_again(database):
    core = _coordinator(database)
    _load_history(core)
    core.run_cycle(_nodes(("n1", 700), ("n2", 700), ("n3", 700)), now=NOW)
    before = _holders(core)
    on_n2 = {lfn for lfn, node in before.items() if node == "n2"}
    assert on_n2
    report = core.run_cycle(_nodes(("n1", 700), ("n3", 700), ("n4", 700)), now=NOW)
    after = _holders(core)
    assert report.moved == len(on_n2)
    assert on_n2 <= set(after) and "n2" not in after.values()
    assert all(after[lfn] == node for lfn, node in before.items() if node != "n2")


def test_released_files_go_elsewhere(database):
    core = _coordinator(database)
    _load_history(core, groups=2)
    nodes = _nodes(("n1", 2000), ("n2", 2000))
    core.run_cycle(nodes, now=NOW)
    holders = _holders(core)
    lfn, node = sorted(holders.items())[0]
    assert core.release(node, [lfn, "/never/seen"], "no room", now=NOW) == 1
    core.run_cycle(nodes, now=NOW + 1)
    assert _holders(core)[lfn] != node
    # after the release expires the file may go back; at least it is placed
    core.run_cycle(nodes, now=NOW + 10 * core.release_ttl)
    assert lfn in _holders(core)


def test_a_draining_node_gets_nothing(database):
    core = _coordinator(database)
    _load_history(core, groups=2)
    nodes = _nodes(("n1", 2000), ("n2", 2000))
    core.run_cycle(nodes, now=NOW)
    assert core.set_draining("n1", True)
    core.run_cycle(nodes, now=NOW)
    assert to_wire(core.assignments("n1")) == {"node": "n1", "cycle": 2, "files": [], "draining": True,
                                                  "groups": []}
    assert set(_holders(core).values()) == {"n2"}


def test_incremental_cycle_rekeys_only_touched_groups(database):
    core = _coordinator(database)
    _load_history(core)
    nodes = _nodes(("n1", 700))
    assert core.run_cycle(nodes, now=NOW).groups_rekeyed == 24  # 12 job groups + 12 task groups
    assert core.run_cycle(nodes, now=NOW).groups_rekeyed == 0
    core.submit_jobs([JobRecord("late", "bob", ["/store/g0/f0"], task="task0")])
    core.report_events([{"job_id": "late", "state": "started", "time": NOW}])
    assert core.run_cycle(nodes, now=NOW).groups_rekeyed == 2


def test_pinned_files_are_placed_first_and_stay(database):
    core = _coordinator(database)
    _load_history(core)
    nodes = _nodes(("n1", 700))  # 665 bytes: two groups of 300
    core.run_cycle(nodes, now=NOW)
    assert "/store/g0/f0" not in _holders(core)  # the least popular group
    answer = core.pin(["/store/g0/f0", "/never/asked"], ["task:task1", "task:nope"], pin=True)
    assert to_wire(answer) == {"files": 5, "pinned": 5, "unknown_groups": ["task:nope"]}
    core.run_cycle(nodes, now=NOW)
    holders = _holders(core)
    pinned = {"/store/g0/f0", "/store/g1/f0", "/store/g1/f1", "/store/g1/f2"}
    assert pinned <= set(holders)  # /never/asked has no size: 1 GiB does not fit, it is simply not placed
    files = core.assignments("n1", now=NOW).files
    assert {f.lfn for f in files[:4]} == pinned
    scores = [f.score for f in files]
    assert scores == sorted(scores, reverse=True)
    # much more popular new accesses cannot displace pinned files
    core.submit_jobs([JobRecord("hot", "bob", ["/store/g11/f0"], sizes={"/store/g11/f0": 100})])
    core.report_events([{"job_id": "hot", "state": "started", "time": NOW}])
    core.run_cycle(nodes, now=NOW)
    assert pinned <= set(_holders(core))
    core.pin([], ["task:task1"], pin=False)
    assert core.pin(["/store/g0/f0"], [], pin=False).pinned == 1
    core.store.close()
    assert _coordinator(database).state.pinned == {core.store.file_ids(["/never/asked"])["/never/asked"]}


def test_cycles_place_changes_between_full_placements(database):
    core = _coordinator(database, full_every=2)
    _load_history(core)
    nodes = _nodes(("n1", 700), ("n2", 700))
    kinds = [core.run_cycle(nodes, now=NOW).kind]
    for i in range(4):
        core.submit_jobs([JobRecord(f"again{i}", "bob", [f"/store/g{i}/f0"])])
        core.report_events([{"job_id": f"again{i}", "state": "started", "time": NOW + i}])
        kinds.append(core.run_cycle(nodes, now=NOW).kind)
    kinds.append(core.run_cycle(nodes, now=NOW).kind)
    assert kinds == ["full", "changes", "changes", "full", "changes", "unchanged"]
    # a new node is a change of the world: a full placement
    assert core.run_cycle(_nodes(("n1", 700), ("n2", 700), ("n3", 700)), now=NOW).kind == "full"


def test_a_coordinator_that_loads_the_database_again_places_from_what_it_read(database):
    """A leader that lost the lock and took it back loads the database again: the placement another leader
    saved meanwhile, not the one its cycles kept, is what its next cycle starts from."""
    core = _coordinator(database)
    _load_history(core)
    nodes = _nodes(("n1", 700), ("n2", 700))
    core.run_cycle(nodes, now=NOW)
    other = _coordinator(database)  # the other leader: the same history, one node gone and back empty
    other.run_cycle(_nodes(("n2", 700)), now=NOW)
    other.run_cycle(nodes, now=NOW)
    core.load()
    assert core.placement == other.placement
    core.submit_jobs([JobRecord("again", "bob", ["/store/g0/f0"])])
    core.report_events([{"job_id": "again", "state": "started", "time": NOW}])
    assert core.run_cycle(nodes, now=NOW).kind == "full"  # not an update of what its cycles kept before


def test_a_hot_group_is_placed_by_an_incremental_cycle(database):
    core = _coordinator(database)
    _load_history(core)
    nodes = _nodes(("n1", 700), ("n2", 700))
    core.run_cycle(nodes, now=NOW)
    assert "/store/g0/f0" not in _holders(core)
    core.submit_jobs([JobRecord(f"hot{i}", "bob", [f"/store/g0/f{k}" for k in range(3)]) for i in range(20)])
    core.report_events([{"job_id": f"hot{i}", "state": "started", "time": NOW} for i in range(20)])
    report = core.run_cycle(nodes, now=NOW)
    assert report.kind == "changes" and report.moved >= 3
    holders = _holders(core)
    assert len({holders[f"/store/g0/f{k}"] for k in range(3)}) == 1
    assert core.run_cycle(nodes, now=NOW).moved == 0


def test_a_new_size_of_a_known_file_makes_a_full_cycle(database):
    core = _coordinator(database)
    _load_history(core)
    nodes = _nodes(("n1", 700))
    core.run_cycle(nodes, now=NOW)
    core.submit_jobs([JobRecord("new-file", "bob", ["/store/g11/f0", "/store/new"], sizes={"/store/new": 5})])
    core.report_events([{"job_id": "new-file", "state": "started", "time": NOW}])
    assert core.run_cycle(nodes, now=NOW).kind == "changes"  # a new file comes with its accessed group
    core.submit_jobs([JobRecord("resized", "bob", ["/store/g11/f0"], sizes={"/store/g11/f0": 400})])
    assert core.run_cycle(nodes, now=NOW).kind == "full"
    used = sum(core.state.size(fid) for fid in core.placement)
    assert used <= 665


def test_reading_scores_between_cycles_does_not_hide_a_new_job_from_the_next_cycle(database):
    # Regression: /files/top and /files/{lfn} refreshed the rating state and so consumed the groups the
    # next cycle should have re-placed; the dashboard polls /files/top, and the new file was never placed.
    core = _coordinator(database)
    _load_history(core, groups=1)
    nodes = _nodes(("n1", 10_000))
    core.run_cycle(nodes, now=NOW)
    core.submit_jobs([JobRecord("late", "alice", ["/store/late/f0"], sizes={"/store/late/f0": 100})])
    core.report_events([{"job_id": "late", "state": "started", "time": NOW + 1}])
    assert "/store/late/f0" in {core.state.lfns[fid] for fid, _ in core.state.top_files(10, NOW + 2)}
    report = core.run_cycle(nodes, now=NOW + 2)
    assert report.kind != "unchanged"
    assert _holders(core).get("/store/late/f0") == "n1"


def test_an_event_counts_only_for_a_job_of_the_owner_it_names(database):
    # Issue 12: a user puts another user's job id in an ad of their own and runs the cleanup hook; the agent
    # checks the ad's owner against the caller, the coordinator checks it against the job's first record.
    core = _coordinator(database)
    core.submit_jobs([JobRecord("schedd#1.0", "userb", ["/store/b"])])
    core.submit_jobs([JobRecord("schedd#1.0", "usera", ["/store/a"])])  # a later record keeps the first owner
    forged = core.report_events([{"job_id": "schedd#1.0", "state": "removed", "time": NOW, "owner": "usera"}])
    assert (forged.accepted, forged.refused) == (0, 1)
    real = core.report_events([{"job_id": "schedd#1.0", "state": "removed", "time": NOW, "owner": "userb"}])
    assert (real.accepted, real.refused) == (1, 0)
    admin = core.report_events([{"job_id": "schedd#1.0", "state": "finished", "time": NOW}])  # no owner: signed
    assert admin.accepted == 1                                                                   # pool members


def test_the_files_of_a_new_job_follow_the_node_that_reads_them_until_copied(database):
    core = _coordinator(database)
    inputs = ["/store/new/a", "/store/new/b"]
    core.submit_jobs([JobRecord("only", "alice", inputs, sizes=dict.fromkeys(inputs, 100))])
    core.report_events([{"job_id": "only", "state": "started", "time": NOW}])
    nodes = _nodes(("n1", 1000), ("n2", 500))
    core.run_cycle(nodes, now=NOW)
    assert set(_holders(core).values()) == {"n1"}  # the emptiest node
    core.report_reads("n2", ["/store/new/a"], ttl=30, now=NOW + 1)  # the job runs on n2, reading storage
    report = core.run_cycle(nodes, now=NOW + 2)
    assert report.moved == 2 and set(_holders(core).values()) == {"n2"}
    listed = core.assignments("n2", now=NOW + 2).files
    assert {(f.lfn, f.defer) for f in listed} == {("/store/new/a", True), ("/store/new/b", True)}
    core.report_reads("n2", [], ttl=30, now=NOW + 40)  # the job is done: n2 copies them, and they stay
    assert core.run_cycle(nodes, now=NOW + 41).moved == 0 and set(_holders(core).values()) == {"n2"}


def test_a_new_group_waits_for_its_first_reader_then_goes_to_its_node(database):
    core = _coordinator(database, first_read_wait=60.0)
    inputs = ["/store/new/a", "/store/new/b"]
    twice = [JobRecord(f"j{i}", "alice", inputs, sizes=dict.fromkeys(inputs, 100)) for i in range(2)]
    core.submit_jobs(twice)  # two jobs: not deferred, so without the wait it would be copied at once
    core.report_events([{"job_id": f"j{i}", "state": "started", "time": NOW} for i in range(2)])
    nodes = _nodes(("n1", 1000), ("n2", 500))
    assert core.run_cycle(nodes, now=NOW + 1).placed == 0  # no job reads it yet: where would it help?
    core.report_reads("n2", ["/store/new/a"], ttl=30, now=NOW + 2)  # the first job runs on n2
    core.run_cycle(nodes, now=NOW + 3)
    assert _holders(core) == {"/store/new/a": "n2", "/store/new/b": "n2"}  # the whole group, with its reader
    assert not any(f.defer for f in core.assignments("n2", now=NOW + 3).files)  # copied while read


def test_a_new_group_no_job_reads_is_placed_once_the_wait_is_over(database):
    core = _coordinator(database, first_read_wait=60.0)
    core.submit_jobs([JobRecord("idle", "alice", ["/store/new/a"], sizes={"/store/new/a": 100})])
    core.report_events([{"job_id": "idle", "state": "started", "time": NOW}])
    nodes = _nodes(("n1", 1000))
    assert core.run_cycle(nodes, now=NOW + 59).placed == 0
    assert core.run_cycle(nodes, now=NOW + 61).placed == 1


def test_unpinning_a_file_nobody_reads_takes_back_its_placement(database):
    core = _coordinator(database)
    nodes = _nodes(("n1", 4 << 30))  # the pinned file's size is unknown: it counts as 1 GiB
    core.submit_jobs([JobRecord("j", "bob", ["/store/x/read.root"], sizes={"/store/x/read.root": 100})])
    core.report_events([{"job_id": "j", "state": "started", "time": NOW}])
    core.pin(["/store/x/pinned.root"], [], pin=True)
    core.run_cycle(nodes, now=NOW, full=True)
    assert "/store/x/pinned.root" in _holders(core)
    core.pin(["/store/x/pinned.root"], [], pin=False)
    for _ in range(2):  # an incremental cycle and a full one
        core.run_cycle(nodes, now=NOW + 60, full=_ == 1)
        assert set(_holders(core)) == {"/store/x/read.root"}


def _hot_and_cold(core: Coordinator, hot_jobs: int = 9, tasks: bool = False) -> None:
    """Group 'hot' (3 files of 100 bytes) read by ``hot_jobs`` jobs, groups c0..c2 by one job each (``tasks``:
    each job a task of its own, as HTCondor clusters of one job)."""
    jobs, events = [], []
    for name, count in [("hot", hot_jobs), ("c0", 1), ("c1", 1), ("c2", 1)]:
        inputs = [f"/store/{name}/f{i}" for i in range(3)]
        for j in range(count):
            jobs.append(JobRecord(f"{name}-{j}", "alice", inputs, sizes=dict.fromkeys(inputs, 100),
                                  task=f"{name}-{j}" if tasks else None))
            events.append({"job_id": f"{name}-{j}", "state": "started", "time": NOW - 1.0})
    core.submit_jobs(jobs)
    core.report_events(events)


@pytest.mark.parametrize("tasks", [False, True], ids=["no-tasks", "a-task-per-job"])
def test_a_popular_group_gets_replicas_copied_from_its_holder(database, tasks):
    core = _coordinator(database, max_copies=3)
    _hot_and_cold(core, tasks=tasks)
    nodes = _nodes(("n1", 1000), ("n2", 1000), ("n3", 1000), ("n4", 1000))
    core.run_cycle(nodes, now=NOW)
    primary = {_holders(core)[f"/store/hot/f{i}"] for i in range(3)}
    assert len(primary) == 1
    (home,) = primary
    # hot has 9 of 12 accesses: 3 nodes' worth of 4, capped at 3 copies
    replica_nodes = {n.name for n in nodes
                     if any(f.peers_only is True for f in core.assignments(n.name, now=NOW).files)}
    assert len(replica_nodes) == 2 and home not in replica_nodes
    for name in replica_nodes:
        entries = [f for f in to_wire(core.assignments(name, now=NOW).files) if f.get("peers_only")]
        assert sorted(f["lfn"] for f in entries) == [f"/store/hot/f{i}" for i in range(3)]
        assert all(f["peers"][0] == home and name not in f["peers"] for f in entries)
        first = next(f for f in core.assignments(home, now=NOW).files if f.lfn == entries[0]["lfn"])
        assert "peers" not in to_wire(first)  # the first copy comes from storage
        assert entries[0]["score"] < first.score  # a replica goes before any first copy when room is short
    assert core.sizes(NOW)["replicas"] == 6
    assert sum(n.replica_files for n in core.node_summary([])) == 6
    # nothing changed: the same replicas, on the same nodes
    before = {n.name: core.assignments(n.name, now=NOW).files for n in nodes}
    core.run_cycle(nodes, now=NOW + 10.0, full=True)
    assert {n.name: [f.lfn for f in core.assignments(n.name, now=NOW + 10.0).files] for n in nodes} == \
        {name: [f.lfn for f in files] for name, files in before.items()}


def test_replicas_make_way_for_first_copies(database):
    core = _coordinator(database, max_copies=3)
    _hot_and_cold(core)
    roomy = _nodes(("n1", 1000), ("n2", 1000))
    core.run_cycle(roomy, now=NOW)
    assert core.sizes(NOW)["replicas"] == 3
    # smaller devices: the four groups' first copies need all the room
    core.run_cycle(_nodes(("n1", 650), ("n2", 650)), now=NOW + 1.0)
    assert core.sizes(NOW)["replicas"] == 0 and len(core.placement) == 12


def test_no_replicas_by_default_in_the_core(database):
    core = _coordinator(database)
    _hot_and_cold(core)
    core.run_cycle(_nodes(("n1", 1000), ("n2", 1000)), now=NOW)
    assert core.replicas == {} and not any("peers" in f for f in to_wire(core.assignments("n1", now=NOW).files))


def _named_groups(core: Coordinator, node: str) -> list[list[str]]:
    """The input groups ``node``'s assignment names, as their files' LFNs."""
    answer = core.assignments(node, now=NOW)
    return [sorted(answer.files[i].lfn for i in positions) for positions in answer.groups]


def test_assignments_name_the_hot_groups_each_node_is_given_whole(database):
    """Where a hot group's first copy and each replica are: the nodes publish its key (htda.cache.groups)."""
    core = _coordinator(database, max_copies=3)
    _hot_and_cold(core)
    nodes = _nodes(("n1", 1000), ("n2", 1000), ("n3", 1000), ("n4", 1000))
    core.run_cycle(nodes, now=NOW)
    hot = [f"/store/hot/f{i}" for i in range(3)]
    holding = {n.name for n in nodes if hot in _named_groups(core, n.name)}
    assert len(holding) == 3  # the first copy's node and both replicas'
    assert {_holders(core)[hot[0]]} < holding
    for name in {n.name for n in nodes} - holding:
        assert hot not in _named_groups(core, name)
    for n in nodes:  # every group named is one placed there whole
        for files in _named_groups(core, n.name):
            assert len(files) == 3 and len({f.rsplit("/", 1)[0] for f in files}) == 1
            listed = {f.lfn for f in core.assignments(n.name, now=NOW).files}
            assert set(files) <= listed


def test_a_group_split_over_nodes_is_named_nowhere(database):
    core = _coordinator(database)
    core.submit_jobs([JobRecord("big", "alice", ["/store/big/a", "/store/big/b"],
                                sizes={"/store/big/a": 600, "/store/big/b": 600})])
    core.report_events([{"job_id": "big", "state": "started", "time": NOW - 1.0}])
    core.run_cycle(_nodes(("n1", 700), ("n2", 700)), now=NOW)
    assert len(set(_holders(core).values())) == 2  # too big for one node: split
    assert _named_groups(core, "n1") == [] and _named_groups(core, "n2") == []
