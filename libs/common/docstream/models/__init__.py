"""The model stack: where model files come from, how text becomes tokens, and the embedders that run a model.

``embedder`` is the contract (the ``Embedder`` protocol and its batch type) that the in-process backends
(``embedding``, over the runtimes of ``runtime``) and the OpenAI-compatible endpoint (``endpoint``, speaking
``endpoint_protocol``) both fulfil; ``files`` resolves a model's folder (never a hub) and ``tokenization`` counts
its tokens. The package imports nothing heavy itself: torch loads with the module that needs it.
"""
