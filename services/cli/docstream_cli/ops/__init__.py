"""The CLI's own commands, those that are no service's main: a job's submission (``submit``, its exit status in
``submit_outcome``), progress (``status``) and export (``results``, and a results preview ``results_preview``);
deleting sources (``delete``); API keys (``apikey``); a sink's comparison with the store (``sink_verify``); dead
letters (``dlq``), replay by offset reset (``replay``) and similarity search (``search``). Each keeps its pure
planning apart from its Kafka, store and console I/O (docs/replay.md)."""
