"""docs/configuration.rst is what the schemas say: regenerate it when a key changes."""

from __future__ import annotations

from pathlib import Path

from htda.node.configref import reference

REPO = Path(__file__).resolve().parents[2]


def test_the_configuration_reference_is_generated_from_the_schemas():
    page = (REPO / "docs" / "configuration.rst").read_text()
    stale = "docs/configuration.rst is stale: python -m htda.node.configref > docs/configuration.rst"
    assert page == reference(), stale


def test_every_key_of_every_section_is_documented():
    page = reference()
    for section in ("[node]", "[pool]", "[tls]", "[coordinator]", "[locator]", "[cache]"):
        assert f"\n{section}\n" in page
    assert "``high_watermark``" in page and "cache.devices[]" in page
    assert "``secret_file``" in page and "(required)" in page
