"""S1: one no-op on_create handler (kopf-rs: kopf-rs-operator create)."""
import kopf
from bench_signals import signal, start_flusher


@kopf.on.startup()
async def flusher(**_):
    start_flusher()


@kopf.on.create("", "v1", "configmaps")
async def created(name, **_):
    signal("create", name)
