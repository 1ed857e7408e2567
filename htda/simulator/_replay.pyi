"""Types of the simulator's compiled request loop (``_replay.c``), used by :class:`.htda_policy.HTDAPolicy`."""

from collections.abc import Callable
from typing import Any

class Loop:
    def __init__(self, *, group_of: dict[int, int], more_groups: dict[int, set[int]],
                 last_access: dict[int, float], entry_key: dict[int, float], sizes: dict[int, int],
                 heap: list[tuple[float, int]], group_bytes: dict[int, int] | None, rating: Any,
                 file_key: Callable[[int], float], capacity: int, per_job: bool, fast: bool) -> None: ...
    def replay(self, times: list[float], ids: list[int], sizes: list[int], groups: list[int],
               used: int, /) -> tuple[int, int, int, int, int]: ...
