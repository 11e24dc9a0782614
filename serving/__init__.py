"""fdb's server side: a FastAPI/uvicorn app that hosts real dialogue systems behind
``/v1/realtime`` (the turn-based session protocol), ``/v1/realtime/capabilities``,
``/v1/models`` and ``/health``.

Entry points: :func:`serving.launcher.serve` (blocking, used by ``python -m fdb serve``) and
:func:`serving.app.create_app`. Heavy model packages are imported only when a system loads.
"""
