"""The cache component."""

from .component import CacheComponent

__all__ = ["CacheComponent"]
