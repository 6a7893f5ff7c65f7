"""Running a study: the run loop, `llamalab plan`, the workload, and the checks made during a run."""
