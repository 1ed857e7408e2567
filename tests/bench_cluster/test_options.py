"""The cluster run's pass-through options: ``--coordinator`` and ``--submit`` KEY=VALUE pairs, as TOML values."""

from __future__ import annotations

import pytest

from bench.cluster.__main__ import _settings


def test_pairs_become_typed_settings():
    assert _settings(["relative_fraction=1.0", "first_read_home=false", 'policy="lru"'], "--submit") == {
        "relative_fraction": 1.0, "first_read_home": False, "policy": "lru"}


@pytest.mark.parametrize("pair", ["relative_fraction", "=1", "policy=lru"])
def test_a_bad_pair_names_the_option(pair):
    with pytest.raises(ValueError, match=f"--submit {pair!r}"):
        _settings([pair], "--submit")
