"""The web dashboard: a static page and one JSON summary of the pool."""

from .component import DashboardComponent

__all__ = ["DashboardComponent"]
