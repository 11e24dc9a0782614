"""The native full-duplex side of the server: the ``duplex-baseline`` system.

Modules: ``policy`` (the published decision policy), ``negotiation`` (native session.update
rules and the grant), ``engine`` (units, VAD, decisions, unit-aligned output), ``worker``
(ASR → LLM → TTS per user turn), ``reply_stream`` (the LLM's reply as speakable chunks),
``responder`` (Piper's speech as 24 kHz PCM16), ``speaker`` (one reply's events and audio),
``native`` (the unit loop of a native model's session, e.g. Moshi's: ``serving.gpu``) and
``session`` (the native session, built on :class:`serving.realtime.session.RealtimeSession`).
"""
