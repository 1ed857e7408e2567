"""Sphinx configuration for the HTDA documentation."""

import re
from pathlib import Path

project = "HTDA"
author = "The HTDA developers"
_init = (Path(__file__).parent.parent / "htda" / "__init__.py").read_text()
release = re.search(r'__version__ = "([^"]+)"', _init).group(1)
version = release
import sys

sys.path.insert(0, str(Path(__file__).parent / "_ext"))
extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode", "openapi_doc"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
autodoc_typehints = "description"
