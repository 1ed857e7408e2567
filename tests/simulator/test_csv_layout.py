"""The layout of a CSV trace's rows: names given beside the file, what counts as a header, and the guesses offered
when line 1 is not what the reader expects."""

from __future__ import annotations

import pytest

from htda.simulator.csv_layout import Columns, date_time_seconds, header_hint


@pytest.mark.parametrize("text, message", [
    ("time,object_id", r"columns 'time,object_id' names a column 'time'; a trace's columns are timestamp, object_id, "
                       r"size_bytes, group_id \(_ for one not read\)"),
    ("object_id,_,object_id", "names object_id twice"),
    ("timestamp,_", "names no object_id column"),
    ("", "names a column ''"),
])
def test_columns_given_name_their_own_mistakes(text, message):
    with pytest.raises(ValueError, match=message):
        Columns.given(text)


def test_columns_given_place_each_field_and_may_leave_the_group_out_last():
    given = Columns.given("_, Timestamp ,_,size_bytes,object_id,group_id")
    assert (given.time, given.object, given.size, given.group, given.widths) == (1, 4, 3, 5, (5, 6))
    assert given.from_outside and given.delimiter == ","
    assert Columns.given("object_id").widths == (1,) and Columns.given("object_id").time is None


@pytest.mark.parametrize("row, header", [
    (["version", "time", "op", "size", "lbn"], True),  # no field where a number belongs is one
    (["1", "5", "2a", "512", "42"], False),
    (["1", "2025-01-29T18:47:47Z", "2a", "size", "42"], False),  # a date-time is a timestamp
    (["1", "time", "2a", "512", "42"], False),  # one number where one belongs: data, and its error says so
    (["version", "time"], False),  # not the layout's width: data, and its error says so
])
def test_with_columns_given_line_1_is_a_header_when_no_number_is_where_one_belongs(row, header):
    assert Columns.given("_,timestamp,_,size_bytes,object_id").is_header(row) is header


def test_without_columns_given_a_header_names_one_of_the_columns():
    assert Columns().is_header(["Object_ID ", "whatever"]) and not Columns().is_header(["time", "key", "size"])
    assert not Columns.given("object_id").is_header(["lbn"])  # ids alone: no field tells a header from a request


@pytest.mark.parametrize("row, says", [
    (["version", "time", "op", "size", "lbn"], "perhaps --columns _,timestamp,_,size_bytes,object_id)"),
    (["ts", "key", "bytes", "dataset"], "perhaps --columns timestamp,object_id,size_bytes,group_id)"),
    (["time", "size"], "or --columns names the file's)"),  # no object named: no guess
    (["id", "key"], "or --columns names the file's)"),  # the object named twice: no guess
    (["0 8 0 1"], "(its fields look separated by spaces or tabs: --delimiter space reads them)"),
    (["42932745"], "(a trace of object ids alone, one a line, reads with --columns object_id)"),
    (["# written by tracer 2"], "(it looks like a comment: a trace has none; grep -v '^#' leaves them out)"),
    (["0", "key123", "20", "300", "1", "get", "0"], "(if each row is a request of 7 fields: --columns names them in "
                                                      "order, each one of timestamp, object_id, size_bytes, group_id "
                                                      "or _ for one not read, at least object_id)"),  # Twitter's
    ([" #time", "key", "size"], "(it looks like a comment: a trace has none; grep -v '^#' leaves them out)"),
])
def test_an_unexpected_line_1_gets_a_guess_only_where_one_fits(row, says):
    assert header_hint(row).endswith(says)


def test_a_date_time_is_read_in_utc_unless_it_names_its_zone():
    assert date_time_seconds("2025-01-29T18:47:47.5Z") == 1738176467.5
    assert date_time_seconds("2025-01-29 18:47:47") == 1738176467.0
    assert date_time_seconds("2025-01-29T19:47:47+01:00") == 1738176467.0
    assert date_time_seconds("2025-02-30T10:00:00Z") is None and date_time_seconds("time") is None
