"""Client side of fdb: record paced /v1/realtime sessions, judge their traces, export windows.

- ``fdb.dialects``: the protocol dialects (``turn-based``, ...), one ``Dialect`` record each
- ``recorders.session``: ``record_session`` writes one session directory (docs/formats.md)
- ``recorders.batch``: ``record_many`` runs ``SessionJob``s with bounded concurrency
- ``recorders.pacing``: the absolute 80 ms packet schedule and pacing statistics
- ``recorders.oracle``: ``judge_trace``, the protocol verdict as a pure function of a trace
- ``fdb.playout``: ``playout_window``, the simulated FIFO playout over [0, T] (shared with the
  listening cuts of ``scorers.listening_cut``)
- ``recorders.export``: ``export_v10`` / ``export_v15`` (eligibility in ``recorders.variant``)
- ``fdb.session_records``: ``TraceEvent``, ``SessionRecord`` and friends
"""
