"""Sphinx configuration for the HTDA documentation."""

import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_ext"))

project = "HTDA"
author = "The HTDA developers"
release = re.search(r'__version__ = "([^"]+)"', (HERE.parent / "htda" / "__init__.py").read_text()).group(1)
version = release
extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode", "openapi_doc"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
autodoc_typehints = "description"
