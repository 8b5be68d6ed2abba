"""Operations commands: dead letters (``dlq``), replay by offset reset (``replay``), similarity search (``search``)
and a results preview (``results_preview``). Each keeps its pure planning apart from its Kafka, store and console
I/O (docs/replay.md)."""
