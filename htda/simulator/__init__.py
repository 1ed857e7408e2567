"""The cache simulator: replay access traces through HTDA's rating and placement, the classic and modern
baselines, and the offline bounds (``htda simulate``, ``htda trace generate``; see docs/simulator.rst)."""
