"""Isolating the record that makes the model fail: split the batch in halves until it is alone.

A forward pass that raises is retried on each half of its batch, recursively, so the good
records still get their embeddings (in ~2·log2(n) extra passes for one bad record) and the
bad one ends alone; it is then retried up to ``attempts`` times in all before it is given up
as failed. A ``PartialBatchError`` names the failed records itself (an endpoint that bisected its
request down to the input it refuses): those fail at once, the others keep their results.
FatalError is never isolated: it ends the service; nor is BackendUnavailable (the backend, not
a record, is at fault): the caller waits and runs the batch again. Pure: no torch, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from docstream.errors import BackendUnavailable, FatalError, PartialBatchError

__all__ = ["Isolated", "embed_isolating"]


@dataclass(frozen=True, slots=True)
class Isolated:
    """A record the model failed on when run alone.

    Attributes:
        error: the last error the model raised.
        attempts: forward passes of this record alone.
    """

    error: BaseException
    attempts: int


def embed_isolating(
    embed: Callable[[Sequence[int]], Sequence[Any]],
    count: int,
    *,
    attempts: int,
    on_failure: Callable[[Sequence[int], BaseException], None] | None = None,
) -> list[Any]:
    """Embed records ``0..count-1``, isolating failures.

    Args:
        embed: runs the model on the given record indices; returns one vector per index, in order.
        count: records in the batch.
        attempts: forward passes a lone failing record gets before it is given up (at least 1).
        on_failure: told (indices, error) each time a forward pass fails.

    Returns:
        Per record, its vector or an ``Isolated`` failure.

    Raises:
        FatalError: the model raised FatalError.
        BackendUnavailable: the model's backend does not answer.
        ValueError: ``attempts`` < 1.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    results: list[Any] = [None] * count

    def failed(indices: Sequence[int], tries: int, exc: BaseException) -> None:
        if on_failure is not None:
            on_failure(indices, exc)
        if len(indices) > 1:
            middle = len(indices) // 2
            run(indices[:middle], 0)
            run(indices[middle:], 0)
        elif tries + 1 < attempts:
            run(indices, tries + 1)
        else:
            results[indices[0]] = Isolated(exc, tries + 1)

    def run(indices: Sequence[int], tries: int) -> None:
        try:
            vectors = embed(indices)
            if len(vectors) != len(indices):
                raise ValueError(f"model returned {len(vectors)} vectors for {len(indices)} inputs")
        except (FatalError, BackendUnavailable):
            raise
        except PartialBatchError as exc:
            if len(exc.outputs) != len(indices):
                failed(indices, tries, ValueError(f"model returned {len(exc.outputs)} outputs for {len(indices)} "
                                                  "inputs"))
                return
            if on_failure is not None:
                on_failure([indices[i] for i, _ in exc.failures], exc)
            for index, out in zip(indices, exc.outputs, strict=True):
                results[index] = Isolated(out, tries + 1) if isinstance(out, BaseException) else out
            return
        except Exception as exc:  # noqa: BLE001 - the model's failure, whatever its type, is what we isolate
            failed(indices, tries, exc)
            return
        for index, vector in zip(indices, vectors, strict=True):
            results[index] = vector

    if count:
        run(list(range(count)), 0)
    return results
