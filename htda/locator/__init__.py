"""The locator component."""

from .component import LocatorComponent

__all__ = ["LocatorComponent"]
