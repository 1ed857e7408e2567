"""The cluster bench's progress within a pass (bench.cluster.progress)."""

from bench.cluster.progress import PassProgress, progress_line


def test_progress_line_reads_as_a_sentence():
    assert progress_line("htda: pass 1", 5, 12, 40.4) == "htda: pass 1: 5/12 jobs done, 40 s"
    assert progress_line("direct: pass 2", 0, 3, 9.6, running=3) == "direct: pass 2: 0/3 jobs done, 3 running, 10 s"


def test_a_line_every_ten_seconds_until_the_pass_is_done():
    now, said = [100.0], []
    progress = PassProgress("htda: pass 1", 12, said.append, clock=lambda: now[0])
    for seconds, done in [(3, 1), (10, 2), (15, 5), (21, 7), (31, 11), (45, 12)]:
        now[0] = 100.0 + seconds
        progress.update(done, running=2)
    assert said == ["htda: pass 1: 2/12 jobs done, 2 running, 10 s", "htda: pass 1: 7/12 jobs done, 2 running, 21 s",
                    "htda: pass 1: 11/12 jobs done, 2 running, 31 s"]  # nothing once all 12 are done
