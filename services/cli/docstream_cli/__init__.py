"""docstream_cli: the composition root, the `docstream` command and `docstream run`.

The one package that imports every service: the library (``docstream``) never imports a service and
the services never import each other (the import contracts of pyproject.toml, checked by
``make lint``). ``app`` is the typer application; ``runner`` runs the whole pipeline in one process; ``ops``
holds the user commands (submit, status, results, delete, apikey, sink verify, dlq, replay, search).
"""
