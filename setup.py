"""Packaging for HTDA.  ``pip install .`` (or ``-e .``) installs the daemon, the CLI and the hooks."""

import re
from pathlib import Path

from setuptools import Extension, find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "htda" / "__init__.py").read_text()).group(1)

# Plugins are found by name through these entry-point groups; a site can add its own
# from another distribution.  Each component's issue owns the lines of its groups.
ENTRY_POINTS = {
    "console_scripts": [
        "htda-node = htda.node.daemon:main",
        "htda = htda.cli:main",
    ],
    "htda.components": [
        "coordinator = htda.coordinator:CoordinatorComponent",
        "locator = htda.locator:LocatorComponent",
        "cache = htda.cache:CacheComponent",
        "submit = htda.condor.agent:SubmitAgent",
        "dashboard = htda.dashboard:DashboardComponent",
    ],
    # storage backends (fetch from), cache backends (place on), union-view drivers
    "htda.storage": [
        "posix = htda.cache.backends.posix:PosixStorage",
        "xrootd = htda.cache.backends.xrootd:XRootDStorage",
        "http = htda.cache.backends.http:HTTPStorage",
    ],
    "htda.cachedev": [
        "posix = htda.cache.backends.posix:PosixDevice",
        "logical = htda.cache.backends.logical:LogicalDevice",
    ],
    "htda.union": [
        "mergerfs = htda.cache.union.mergerfs:MergerfsDriver",
        "overlayfs = htda.cache.union.overlayfs:OverlayfsDriver",
        "symlink = htda.cache.union.symlink:SymlinkDriver",
    ],
    # rating policies of the coordinator (and the simulator)
    "htda.policies": [
        "lrfu = htda.coordinator.rating:LRFUPolicy",
        "lru = htda.coordinator.rating:LRUPolicy",
        "lfu = htda.coordinator.rating:LFUPolicy",
        "lrfu-adaptive = htda.coordinator.adaptive:AdaptiveLRFUPolicy",
    ],
    # cache replacement policies the simulator compares HTDA's with
    "htda.simulator.policies": [
        "lru = htda.simulator.policies:LRUPolicy",
        "lfu = htda.simulator.policies:LFUPolicy",
        "arc = htda.simulator.policies:ARCPolicy",
        "s3fifo = htda.simulator.modern:S3FIFOPolicy",
        "wtinylfu = htda.simulator.modern:WTinyLFUPolicy",
    ],
}

# The hot path of the lrfu-adaptive rating (htda.coordinator.adaptive) is C: the coordinator and the simulator
# record every access through it.  Its arithmetic must round as Python's does: no contraction of a*b+c into one
# fused multiply-add.
# The simulator's request loop of HTDA's policy (htda.simulator.htda_policy) is C too: it compares keys, never
# computes them, but takes the same flags.
STRICT_FLOATS = ["-ffp-contract=off", "-fno-fast-math"]
HEADERS = ["htda/_kernel.h", "htda/_adaptive_api.h"]  # shared by both kernels
KERNELS = [
    Extension("htda.coordinator._adaptive", ["htda/coordinator/_adaptive.c"], depends=HEADERS,
              extra_compile_args=STRICT_FLOATS),
    Extension("htda.simulator._replay", ["htda/simulator/_replay.c"], depends=HEADERS,
              extra_compile_args=STRICT_FLOATS),
]

setup(
    name="htda",
    version=VERSION,
    description="Node-local SSD caching and data-aware job steering for HTCondor clusters",
    long_description=(HERE / "README.rst").read_text(),
    long_description_content_type="text/x-rst",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=find_packages(include=["htda", "htda.*"]),
    package_data={"htda": ["py.typed", "static/*", "coordinator/migrations/script.py.mako", "coordinator/*.pyi",
                           "simulator/*.pyi"]},
    ext_modules=KERNELS,
    scripts=[str(p) for p in sorted((HERE / "hooks").glob("htda_*")) if p.is_file()],
    install_requires=[
        "CherryPy>=18.8",
        "pycurl>=7.45",
        "SQLAlchemy>=2.0",
        "alembic>=1.13",
        "htcondor>=24.0",
        "uproot>=5.0",
        "numpy>=1.24",
        "zstandard>=0.19",  # htda simulate: public traces come zstd-compressed
        "awkward>=2.0",
        "msgspec>=0.18",  # htda.protocol: the typed bodies between roles and their schemas
    ],
    extras_require={
        "postgres": ["psycopg2-binary>=2.9"],
        "test": ["pytest>=7.4", "pytest-timeout>=2.1", "pytest-xdist>=3.5", "psycopg2-binary>=2.9", "cryptography>=41",
                 "ruff>=0.4", "mypy>=1.8", "matplotlib>=3.7", "hypothesis>=6.80", "schemathesis>=4.0",
                 "websocket-client>=1.6"],
        "docs": ["sphinx>=7.0"],
        "plots": ["matplotlib>=3.7"],
    },
    entry_points=ENTRY_POINTS,
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: System :: Distributed Computing",
        "Intended Audience :: Science/Research",
    ],
)
