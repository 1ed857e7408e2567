"""HTDA: node-local caching and data-aware steering for HTCondor clusters."""

__version__ = "0.1.0"
