"""The ``/v1/realtime`` turn-based session protocol (server side).

Modules: ``protocol`` (typed client events and their parsing), ``events`` (typed server
events), ``negotiation`` (session.update rules and the capability grant), ``audio_input``
(units and the input timeline), ``listener`` (200 ms units, VAD, utterances), ``responder``
(ASR → LLM → TTS per turn), ``delivery`` (reply audio pacing), ``outbox`` (ordered sending),
``session`` (the per-connection state machine) and ``endpoint`` (admission and the socket).
"""
