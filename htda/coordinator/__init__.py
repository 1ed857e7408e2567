"""The coordinator component."""

from .component import CoordinatorComponent

__all__ = ["CoordinatorComponent"]
