"""How a Kopf handler tells the runner it ran: the same protocol as kopf_bench::signals.

One line per call, ``<kind> <name> <unix-ns>``, appended to ``$KOPF_BENCH_SIGNALS``
through a 64 KiB buffer that a background task flushes every 100 ms.
"""
import asyncio
import os
import time

_OUT = open(os.environ["KOPF_BENCH_SIGNALS"], "a", buffering=64 * 1024) if os.environ.get("KOPF_BENCH_SIGNALS") else None
_FLUSHER = None


def signal(kind: str, name: str) -> None:
    if _OUT is not None:
        _OUT.write(f"{kind} {name} {time.time_ns()}\n")


async def _flush_periodically() -> None:
    try:
        while True:
            await asyncio.sleep(0.1)
            _OUT.flush()
    finally:
        _OUT.flush()


def start_flusher() -> None:
    global _FLUSHER
    if _OUT is not None and _FLUSHER is None:
        _FLUSHER = asyncio.get_running_loop().create_task(_flush_periodically())
