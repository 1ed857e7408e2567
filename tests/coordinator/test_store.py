"""The store on SQLite and PostgreSQL: schema versioning, idempotent ingest and events, placement, releases."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic import command
from sqlalchemy import create_engine, event, insert, select, text

from htda.coordinator import migrations
from htda.coordinator.model import Job, Meta
from htda.coordinator.store import JobRecord, SchemaVersionError, Store, group_name, with_driver


def _job(job_id, inputs, task=None, sizes=None):
    return JobRecord(job_id=job_id, owner="alice", inputs=inputs, task=task, sizes=sizes or {}, cpus=1, memory=2000,
                     submit_time=100.0)


def test_schema_is_created_with_its_version_and_survives_reopening(database, store):
    assert store.schema_version() == migrations.head()
    store.ingest_jobs([_job("j1", ["/a"])])
    store.close()
    again = Store(*database)
    assert again.counts()["jobs"] == 1
    assert again.schema_version() == migrations.head()
    again.close()


def test_a_newer_schema_stops_start_up(database, store):
    table = f'"{store.schema}".{migrations.VERSION_TABLE}' if store.schema else migrations.VERSION_TABLE
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE {table} SET version_num = 'f00dfeed'"))
    store.close()
    with pytest.raises(SchemaVersionError, match="f00dfeed.*newer HTDA"):
        Store(*database)


def _made_before_alembic(database, version: str = "1") -> None:
    """A database as the coordinator made it before Alembic: the tables of the first revision (which is that
    schema), no version table, ``schema_version`` in htda_meta."""
    url, schema = database
    engine = create_engine(with_driver(url))
    if schema:
        engine = engine.execution_options(schema_translate_map={None: schema})
    with engine.begin() as conn:
        if schema:
            conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        cfg = migrations.config()
        cfg.attributes.update(connection=conn, schema=schema)
        command.upgrade(cfg, migrations.LEGACY[1])
        prefix = f'"{schema}".' if schema else ""
        conn.execute(text(f"DROP TABLE {prefix}{migrations.VERSION_TABLE}"))
        conn.execute(insert(Meta), [{"key": "schema_version", "value": version}, {"key": "cycle", "value": "7"}])
    engine.dispose()


def test_a_database_made_before_alembic_is_upgraded_and_keeps_its_data(database):
    _made_before_alembic(database)
    old = Store(*database)  # stamps the first revision, upgrades to the newest
    assert old.schema_version() == migrations.head() and old.cycle() == 7
    old.ingest_jobs([_job("j1", ["/a"])])
    old.close()
    again = Store(*database)
    assert again.counts()["jobs"] == 1 and again.cycle() == 7
    again.close()


def test_a_pre_alembic_version_this_code_does_not_know_stops_start_up(database):
    _made_before_alembic(database, version="2")
    with pytest.raises(SchemaVersionError, match="schema version 2"):
        Store(*database)


def test_the_revisions_make_exactly_the_model():
    check = subprocess.run([sys.executable, "-m", "htda.coordinator.migrations", "check"], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_jobs_are_idempotent_on_job_id(store):
    first = store.ingest_jobs([_job("j1", ["/a", "/b"]), _job("j2", ["/b", "/c"]), _job("j1", ["/x"])])
    assert (first.accepted, first.duplicates) == (2, 1)
    again = store.ingest_jobs([_job("j1", ["/a", "/b"]), _job("j3", ["/a"])])
    assert (again.accepted, again.duplicates) == (1, 1)
    assert store.counts()["jobs"] == 3
    assert store.counts()["files"] == 3  # /x of the duplicate j1 was never recorded


def test_groups_jobs_with_the_same_inputs_share_one_and_tasks_collect_the_union(store):
    result = store.ingest_jobs([_job("j1", ["/a", "/b"], task="t"), _job("j2", ["/b", "/a"], task="t"),
                                _job("j3", ["/c"], task="t")])
    groups = {}
    for gid, fid in result.members:
        groups.setdefault(gid, set()).add(result.files[fid][0])
    info = store.groups_info(groups)
    by_name = {info[gid]["name"]: files for gid, files in groups.items()}
    assert by_name[group_name(["/a", "/b"])] == {"/a", "/b"}
    assert by_name[group_name(["/c"])] == {"/c"}
    assert by_name["task:t"] == {"/a", "/b", "/c"}
    assert store.counts()["groups"] == 3


def test_a_job_of_a_known_input_group_adds_no_files_and_still_joins_its_task(store):
    store.ingest_jobs([_job("j1", ["/a", "/b"])])
    plain = store.ingest_jobs([_job("j2", ["/b", "/a"])])
    assert (plain.accepted, plain.files, plain.members) == (1, {}, [])
    tasked = store.ingest_jobs([_job("j3", ["/a", "/b"], task="t")])
    names = {gid: info["name"] for gid, info in store.groups_info(gid for gid, _ in tasked.members).items()}
    ids = store.file_ids(["/a", "/b"])
    assert tasked.files == {}
    assert sorted((names[gid], fid) for gid, fid in tasked.members) == [("task:t", ids["/a"]), ("task:t", ids["/b"])]
    assert store.counts()["files"] == 2


def test_job_records_keep_tabs_newlines_backslashes_and_nulls_as_given(store):
    odd = "a\tb\nc\\N\\d\re \u00e9"
    store.ingest_jobs([JobRecord(job_id=odd, owner=odd, inputs=["/a"], task=odd, submit_time=1795642839.303125),
                       JobRecord(job_id="plain", owner="bob", inputs=["/a"], cpus=3, memory=(1 << 31) - 1)])
    with store.engine.connect() as conn:
        rows = {row.job_id: row for row in conn.execute(select(Job.__table__))}
    assert (rows[odd].owner, rows[odd].task, rows[odd].cpus, rows[odd].submit_time) == (odd, odd, None,
                                                                                          1795642839.303125)
    assert (rows["plain"].task, rows["plain"].cpus, rows["plain"].memory) == (None, 3, (1 << 31) - 1)
    assert rows["plain"].submit_time is not None


def test_sizes_are_recorded_and_updated(store):
    store.ingest_jobs([_job("j1", ["/a", "/b"], sizes={"/a": 10})])
    result = store.ingest_jobs([_job("j2", ["/a", "/b"], sizes={"/a": 12, "/b": 5})])
    assert sorted(result.files.values()) == [("/a", 12), ("/b", 5)]
    assert {lfn: size for _, lfn, size in store.iter_files()} == {"/a": 12, "/b": 5}


def _file_lookups(store, ingest) -> int:
    """How many statements ``ingest()`` sent that read the files' rows."""
    seen = []

    def note(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("SELECT") and "htda_files" in statement:
            seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", note)
    try:
        ingest()
    finally:
        event.remove(store.engine, "before_cursor_execute", note)
    return len(seen)


def test_a_job_bringing_the_sizes_last_written_for_its_group_reads_no_file_rows(store):
    store.ingest_jobs([_job("j1", ["/a", "/b"], sizes={"/a": 10, "/b": 5})])
    assert _file_lookups(store, lambda: store.ingest_jobs([_job("j2", ["/b", "/a"], sizes={"/a": 10, "/b": 5})])) == 0
    # a size not given may differ from the one written: looked up, as before
    assert _file_lookups(store, lambda: store.ingest_jobs([_job("j3", ["/a", "/b"], sizes={"/a": 10})])) > 0
    resized = store.ingest_jobs([_job("j4", ["/a", "/b"], sizes={"/a": 11, "/b": 5})])
    assert list(resized.files.values()) == [("/a", 11)]
    assert _file_lookups(store, lambda: store.ingest_jobs([_job("j5", ["/a", "/b"], sizes={"/a": 11, "/b": 5})])) == 0
    # another group sharing /a resizes it: this group's next job with the new size is looked up once, then not
    store.ingest_jobs([_job("k1", ["/a", "/c"], sizes={"/a": 12, "/c": 1})])
    shared = store.ingest_jobs([_job("j6", ["/a", "/b"], sizes={"/a": 12, "/b": 5})])
    assert shared.files == {}
    assert _file_lookups(store, lambda: store.ingest_jobs([_job("j7", ["/a", "/b"], sizes={"/a": 12, "/b": 5})])) == 0
    stale = store.ingest_jobs([_job("j8", ["/a", "/b"], sizes={"/a": 11, "/b": 5})])  # the latest report wins
    assert list(stale.files.values()) == [("/a", 11)]
    assert {lfn: size for _, lfn, size in store.iter_files()} == {"/a": 11, "/b": 5, "/c": 1}


def test_the_same_event_twice_counts_once(store):
    store.ingest_jobs([_job("j1", ["/a", "/b"], task="t")])
    started = {"job_id": "j1", "state": "started", "time": 500.0, "node": "w1"}
    first = store.record_events([started, dict(started)])
    assert (first.accepted, first.duplicates, first.unknown) == (1, 1, 0)
    assert len(first.accesses) == 1
    again = store.record_events([started, {"job_id": "nope", "state": "started", "time": 1.0}])
    assert (again.accepted, again.duplicates, again.unknown) == (0, 1, 1)
    assert again.accesses == []
    assert store.counts()["accesses"] == 2
    assert len(list(store.iter_accesses())) == 1


def test_events_update_the_job_and_out_of_order_reports_keep_the_final_state(store):
    store.ingest_jobs([_job("j1", ["/a"]), _job("j2", ["/a"])])
    store.record_events([{"job_id": "j1", "state": "started", "time": 10.0, "node": "w1"},
                         {"job_id": "j2", "state": "removed", "time": 12.0}])
    store.record_events([{"job_id": "j1", "state": "finished", "time": 20.0},
                         {"job_id": "j2", "state": "started", "time": 11.0}])
    with store.engine.connect() as conn:
        rows = {r.job_id: r for r in conn.execute(
            select(Job.job_id, Job.state, Job.start_time, Job.end_time, Job.node))}
    assert (rows["j1"].state, rows["j1"].start_time, rows["j1"].end_time, rows["j1"].node) == \
        ("finished", 10.0, 20.0, "w1")
    assert (rows["j2"].state, rows["j2"].start_time, rows["j2"].end_time) == ("removed", 11.0, 12.0)


def test_file_history_lists_accesses_newest_first(store):
    store.ingest_jobs([_job(f"j{i}", ["/a", f"/other{i}"]) for i in range(5)])
    store.record_events([{"job_id": f"j{i}", "state": "started", "time": 100.0 + i} for i in range(5)])
    fid = store.file_ids(["/a", "/unknown"])
    assert list(fid) == ["/a"]
    history = store.file_history(fid["/a"], limit=2)
    assert history["accesses"] == 5
    assert [r["job_id"] for r in history["recent"]] == ["j4", "j3"]
    assert len(history["groups"]) == 5


def test_placement_and_cycle_are_saved(store):
    store.ingest_jobs([_job("j1", ["/a", "/b", "/c"])])
    ids = store.file_ids(["/a", "/b", "/c"])
    store.save_placement({ids["/a"]: "n1", ids["/b"]: "n2"}, cycle=1)
    store.save_placement({ids["/a"]: None, ids["/b"]: "n1", ids["/c"]: "n1"}, cycle=2)
    assert store.placement() == {ids["/b"]: "n1", ids["/c"]: "n1"}
    assert store.cycle() == 2


def test_releases_expire_and_are_cleared_per_node(store):
    store.ingest_jobs([_job("j1", ["/a", "/b"])])
    ids = store.file_ids(["/a", "/b"])
    store.add_releases("n1", ids.values(), until=200.0, reason="full")
    store.add_releases("n2", [ids["/a"]], until=100.0, reason=None)
    assert store.releases(50.0) == {ids["/a"]: {"n1", "n2"}, ids["/b"]: {"n1"}}
    assert store.releases(150.0) == {ids["/a"]: {"n1"}, ids["/b"]: {"n1"}}
    store.clear_releases("n1")
    assert store.releases(150.0) == {}


def test_nodes_are_upserted_and_drained(store):
    store.save_nodes([{"name": "n1", "url": "http://a", "capacity_bytes": 10, "free_bytes": 5, "last_seen": 1.0}])
    store.save_nodes([{"name": "n1", "url": "http://b", "capacity_bytes": 20, "free_bytes": 5, "last_seen": 2.0},
                      {"name": "n2", "url": "http://c", "capacity_bytes": 30, "free_bytes": None, "last_seen": 2.0}])
    assert store.set_draining("n2", True) and not store.set_draining("ghost", True)
    rows = {r["name"]: r for r in store.nodes()}
    assert (rows["n1"]["url"], rows["n1"]["capacity_bytes"], rows["n1"]["draining"]) == ("http://b", 20, False)
    assert rows["n2"]["draining"] is True


def test_long_lfns_are_stored(store):
    lfn = "/" + "/".join(["d" * 250] * 16)  # ~4 KB: longer than a PostgreSQL index entry may be
    store.ingest_jobs([_job("j1", [lfn])])
    assert list(store.file_ids([lfn])) == [lfn]


def test_the_latest_job_naming_a_file_gives_its_input_group(store):
    store.ingest_jobs([_job("j1", ["/calib", "/a1", "/a2"], task="t")])
    store.ingest_jobs([_job("j2", ["/calib", "/b1"], task="t")])  # later: the likelier reader of /calib now
    ids = store.file_ids(["/calib", "/a1", "/b1", "/never"])
    groups = store.latest_input_groups(ids.values())
    info = store.groups_info(groups.values())
    names = {lfn: info[groups[fid]]["name"] for lfn, fid in ids.items()}
    assert names == {"/calib": group_name(["/calib", "/b1"]), "/b1": group_name(["/calib", "/b1"]),
                     "/a1": group_name(["/calib", "/a1", "/a2"])}  # input groups, never the task's
    assert store.latest_input_groups([]) == {}
    store.ingest_jobs([_job("j3", ["/b1", "/calib"])])  # the same inputs as j2, in another order
    assert store.jobs_per_input_group(set(groups.values())) == {groups[ids["/a1"]]: 1, groups[ids["/b1"]]: 2}
    assert store.jobs_per_input_group([]) == {}
