"""htda/simulator/forked.py: the processes --jobs forks."""

from __future__ import annotations

import subprocess
import sys

from .helpers import restore_ctrl_c

# A Ctrl-C (SIGINT) sent to each child as soon as it is forked, while multiprocessing is still setting it up: 30
# times, since the window is short (before the fix, a few of 30 printed a traceback and exited 1).
INTERRUPTED_AT_ONCE = """
import os, signal, time
from htda.simulator.forked import start_process

def work(writer):
    time.sleep(30)

for i in range(30):
    reader, process = start_process(work, (), f"htda replay {i}")
    os.kill(process.pid, signal.SIGINT)
    process.join(timeout=20)
    reader.close()
    print(process.exitcode)
"""


def test_a_child_interrupted_as_it_starts_ends_quietly():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_AT_ONCE], capture_output=True, text=True, timeout=120,
                          check=True, preexec_fn=restore_ctrl_c)
    assert done.stdout.split() == ["0"] * 30  # each ended (none left running after the join), none with an error
    assert done.stderr == ""  # no "Process htda replay N: Traceback ... KeyboardInterrupt"
