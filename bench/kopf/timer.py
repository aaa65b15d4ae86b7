"""S2, S3, S5: one no-op timer(interval=1) (kopf-rs: kopf-rs-operator timer).

Kopf's timers always keep a finalizer on their objects; there is no
no_finalizers variant.
"""
import kopf
from bench_signals import signal, start_flusher


@kopf.on.startup()
async def flusher(**_):
    start_flusher()


@kopf.timer("", "v1", "configmaps", interval=1)
async def ticked(name, **_):
    signal("tick", name)
