"""The jobs view's pure folds: a job's progress, and its standing among the jobs that wait with it.

The ingest API and ``docstream status`` read them from a store through ``docstream_ingest.job_view``; the reducer
and the inference service use the lanes' standing and a job's progress directly.
"""
