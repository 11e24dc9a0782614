"""The ``/v1/realtime`` turn-based session protocol (server side).

Modules: ``protocol`` (typed client events and their parsing), ``events`` (typed server
events), ``negotiation`` (session.update rules and the capability grant), ``audio_input``
(units and the input timeline), ``session`` (the per-connection protocol), ``graph_session``
(a turn-based session on the session graph of ``serving/graph``) and ``graph_output`` (its
published chunks as events), ``reply`` (one response's events), ``delivery`` (reply audio pacing),
``outbox`` (ordered sending) and ``turn`` (one reply's interruption and pacing). This package
is the protocol layer only: every session runs a session graph (``serving.graph``); the native
kinds' nodes and the native session are ``serving.duplex``, which builds on this package; the
speech chunker, the end-of-turn rule and the dialog's history rules, which they share, are in
``serving.conversation``. Admission and the socket, which pick the
session class of a system, are ``serving.endpoint``.
"""
