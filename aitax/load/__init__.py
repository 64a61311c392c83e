"""Running a load: the stage processes of a run started, made ready, run for a window, drained and stopped."""
