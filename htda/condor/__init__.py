"""Everything HTCondor-specific: ClassAd handling, job-router hooks, startd cron."""
