"""The ``/v1/realtime`` turn-based session protocol (server side).

Modules: ``protocol`` (typed client events and their parsing), ``events`` (typed server
events), ``negotiation`` (session.update rules and the capability grant), ``audio_input``
(units and the input timeline), ``session`` (the per-connection protocol), ``graph_session``
(a turn-based session on the session graph of ``serving/graph``) and ``graph_output`` (its
published chunks as events), ``reply`` (one response's events), ``delivery`` (reply audio pacing),
``outbox`` (ordered sending) and ``endpoint`` (admission and the socket). ``listener``,
``responder``, ``reply_stream`` and ``turn`` serve the native engine of ``serving.duplex``
(``turn`` also paces a graph reply). The speech chunker, the end-of-turn rule and the dialog's
history rules, which the engines share, are in ``serving.conversation``.
"""
