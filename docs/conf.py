"""Sphinx configuration for the HTDA documentation."""

import re
from pathlib import Path

project = "HTDA"
author = "The HTDA developers"
_init = (Path(__file__).parent.parent / "htda" / "__init__.py").read_text()
release = re.search(r'__version__ = "([^"]+)"', _init).group(1)
version = release
extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
autodoc_typehints = "description"
