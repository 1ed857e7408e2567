"""Start-up validation: every config problem stops the node with one line naming file and key."""

import subprocess
import sys
from pathlib import Path

import pytest

from htda.node.config import ConfigError
from htda.node.runtime import load_config

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path, text):
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


BASE = '[node]\ncomponents = ["locator"]\n'


@pytest.mark.parametrize("name", ["all-in-one.toml", "service.toml", "worker.toml"])
def test_example_configs_are_valid(name):
    config = load_config(REPO / "config" / name)
    assert config["node"]["components"]


def test_typo_in_key_fails_start_with_one_line_naming_key_and_file(tmp_path):
    path = write(tmp_path, BASE + "[pool]\nheartbeat_intervall = 2.0\n")
    result = subprocess.run([sys.executable, "-m", "htda.node.daemon", "--config", str(path)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "pool.heartbeat_intervall" in lines[0] and str(path) in lines[0]
    assert "did you mean 'heartbeat_interval'" in lines[0]


@pytest.mark.parametrize("text,needle", [
    (BASE + "[pool]\nexpiry = \"soon\"\n", "'pool.expiry' must be a number"),
    (BASE + "[pool]\nexpiry = -1\n", "'pool.expiry' must be greater than 0"),
    (BASE + "[node]\n", "not valid TOML"),
    ("[node]\nname = 'x'\n", "missing required key 'node.components'"),
    (BASE + "[frobnicator]\nx = 1\n", "unknown section '[frobnicator]'"),
    ('[node]\ncomponents = ["warp-drive"]\n', "unknown component 'warp-drive'"),
    (BASE + "[pool]\nseeds = [\"127.0.0.1:1\"]\n", "'pool.seeds' must hold http"),
    ('[node]\ncomponents = ["locator"]\nlisten = "nowhere"\n', "'node.listen' must be HOST:PORT"),
    (BASE + "[tls]\nenabled = true\n", "'tls.certificate' is required"),
    (BASE + "[pool]\nheartbeat_interval = true\n", "must be a number, not bool"),
    ('[node]\ncomponents = ["locator"]\nthreads = 1.5\n', "'node.threads' must be an integer"),
    ('[node]\ncomponents = ["coordinator"]\n[coordinator]\npolicy = "lrfuu"\n',
     "'coordinator.policy' names no htda.policies plugin (available: "),
    ('[node]\ncomponents = ["coordinator"]\n[coordinator]\nadmission = "lfu"\n',
     "'coordinator.admission' must be one of tinylfu, none"),
    ('[node]\ncomponents = ["cache"]\n[cache]\ndevices = [{path = "d", high_watermark = 0.5, low_watermark = 0.9}]\n',
     "'cache.devices[0]': low_watermark 0.9 is above high_watermark 0.5"),
    # TOML has inf and nan, and its integers reach past what SQLite and the kernels hold
    (BASE + "[pool]\nexpiry = inf\n", "'pool.expiry' must be a finite number, not inf"),
    (BASE + "[pool]\nexpiry = nan\n", "'pool.expiry' must be a finite number, not nan"),
    ('[node]\ncomponents = ["cache"]\n[cache]\ndevices = [{path = "d", capacity = 100000000000000000000}]\n',
     "'cache.devices[0].capacity' must be an integer from -9,223,372,036,854,775,808 to "
     "9,223,372,036,854,775,807, not 100000000000000000000"),
    ('[node]\ncomponents = ["cache"]\n[cache]\ndevices = [{path = "d", capacity = -5}]\n',
     "'cache.devices[0].capacity' must not be negative"),
    ('[node]\ncomponents = ["cache"]\n[cache]\nscrub_bytes_per_cycle = -1\n',
     "'cache.scrub_bytes_per_cycle' must not be negative"),
    ('[node]\ncomponents = ["cache"]\n[cache]\nretry_delay = -30.0\n', "'cache.retry_delay' must not be negative"),
    ('[node]\ncomponents = ["coordinator"]\n[coordinator]\nepoch = 1e300\n', "'coordinator.epoch' must be a unix time"),
    ('[node]\ncomponents = ["submit"]\n[submit]\nmin_fraction = 2.0\n', "'submit.min_fraction' must be in [0, 1]"),
    ('[node]\ncomponents = ["submit"]\n[submit]\nsteer_timeout = -1.0\n', "'submit.steer_timeout' must not be "),
])
def test_bad_values_name_the_key(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    assert needle in message


def test_check_refuses_what_start_would_refuse_and_creates_nothing(tmp_path):
    # a misspelled policy: --check fails, and so does start, before it creates the pool secret
    path = write(tmp_path, '[node]\ncomponents = ["coordinator"]\n[coordinator]\npolicy = "lrfuu"\n'
                           '[pool]\nsecret_file = "pool.secret"\ncreate_secret = true\n')
    for extra in (["--check"], []):
        result = subprocess.run([sys.executable, "-m", "htda.node.daemon", *extra, "--config", str(path)],
                                capture_output=True, text=True, timeout=30)
        assert result.returncode == 2 and "'coordinator.policy'" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.toml"]


def test_check_refuses_a_secret_file_that_start_would_not_create(tmp_path):
    path = write(tmp_path, BASE + '[pool]\nsecret_file = "no-such.secret"\n')
    load_config(path)  # a valid config: the file is this host's business, checked by --check and start
    result = subprocess.run([sys.executable, "-m", "htda.node.daemon", "--check", "--config", str(path)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"htda-node: {path}: 'pool.secret_file' {tmp_path / 'no-such.secret'} does not "
                                     f"exist (and 'pool.create_secret' is false)")


def test_defaults_are_filled_in(tmp_path):
    config = load_config(write(tmp_path, BASE))
    assert config["pool"]["heartbeat_interval"] == 5.0
    assert config["pool"]["read_networks"] == ["127.0.0.0/8", "::1/128"]
    assert config["tls"]["enabled"] is False


def test_check_flag_validates_without_starting():
    result = subprocess.run([sys.executable, "-m", "htda.node.daemon", "--check", "--config",
                             str(REPO / "config" / "all-in-one.toml")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout
