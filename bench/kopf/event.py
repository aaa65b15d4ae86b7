"""S4: one no-op on_event handler (kopf-rs: kopf-rs-operator event)."""
import kopf
from bench_signals import signal, start_flusher


@kopf.on.startup()
async def flusher(**_):
    start_flusher()


@kopf.on.event("", "v1", "configmaps")
async def seen(name, **_):
    signal("event", name)
