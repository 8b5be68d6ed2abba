"""The jobs view: a job's progress, its standing among the jobs that wait with it, and their reading from the store.

``progress`` and ``standing`` are pure folds over job rows; ``view`` reads the rows they fold from a store.
"""
