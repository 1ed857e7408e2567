"""The cache node: backends, validated staging, allocation/eviction and the union view."""

from .component import CacheComponent

__all__ = ["CacheComponent"]
