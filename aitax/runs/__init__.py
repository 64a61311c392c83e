"""The run vocabulary: the applications aitax runs, each described once (`applications`), and the one results model
every run produces and every reader reads back (`results`). Above the pipeline, which it names, and below the
loads, sweeps and experiments that speak it."""
