import pytest

from htda.lfn import normalize_lfn


@pytest.mark.parametrize("raw,expected", [
    ("/store/a.root", "/store/a.root"),
    ("store//a.root", "/store/a.root"),
    ("//store/dir/", "/store/dir"),
])
def test_valid_lfns_are_canonical(raw, expected):
    assert normalize_lfn(raw) == expected


@pytest.mark.parametrize("raw", ["", "/", "/store/../etc/passwd", "..", "/a/./b", "/a\x00b", "/a\nb",
                                 "a\\..\\b", "/" + "x" * 300, "/a" * 3000, 42])
def test_hostile_lfns_are_refused(raw):
    with pytest.raises(ValueError):
        normalize_lfn(raw)
