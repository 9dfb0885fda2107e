"""Running a sweep's cells: in this process, in local worker processes, or on a Ray cluster, each cell cached as it ends."""
