"""The native full-duplex side of the server: the native kinds' graph nodes and the native
session (the ``duplex-baseline`` and ``gpu-native`` systems).

Modules: ``policy`` (the published decision policy), ``negotiation`` (native session.update
rules and the grant), ``node`` (a native kind's unit loop as the graph node of its system's
one-node graph), ``engine`` (duplex_baseline's node: units, VAD, decisions, unit-aligned
output), ``worker`` (ASR → LLM → TTS per user turn), ``reply_stream`` (the LLM's reply as
speakable chunks), ``responder`` (Piper's speech as 24 kHz PCM16), ``speaker`` (one reply's
events and audio), ``native`` (moshi_gpu's node: the unit loop of a native model's session,
the model in ``serving.gpu``) and ``session`` (the native session, built on
:class:`serving.realtime.session.RealtimeSession`, which runs the graph on
``serving.graph.runtime``).
"""
