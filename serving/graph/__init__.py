"""The session graph (the guide's "Session Graph"): nodes with typed streams, control edges,
turn ids on every chunk, interruption fencing and bounded edges.

- ``streams``: the stream vocabulary (pcm16, pcm_f32le, image_frame, transcript, messages,
  text_delta, text, tool_call, tool_response, session), typed payloads, ``Chunk`` and the
  control types.
- ``kinds``: the registry of component kinds (formats consumed/produced, options, turn role)
  and of the stages a ``stages: [...]`` route may name (vad, turn_detection).
- ``declare``: ``load_graph(mapping | yaml)`` parses and validates ``session_nodes`` +
  ``session_publish`` with the guide's error messages; the result is a ``GraphDecl``.
- ``runtime``: ``SessionGraph`` runs a ``GraphDecl`` over ``Node`` adapters in asyncio and
  publishes to a sink (``PublishSink`` by default; anything with ``put/purge/fail/close``).
- ``nodes``: adapters over the embedded models (Silero VAD and Smart Turn stages,
  whisper_transcription, dialog, llama_chat, piper_speech) and ``build_nodes``.
- ``embedded-cascade.yaml``: the bundled embedded-cascade as a declaration.

Declaration format: docs/formats.md, "Session graph".

Rules of the guide not enforced (they concern kinds fdb does not have): the alignment kind's
reply.progress as data vs control, forced/asr alignment options, and the service and
command-line override rules; the reply.delivered rule checks that an audio-publishing node
takes the dialog's interrupt and that the dialog reads its session. ``session`` is exempt from "two nodes never send the
same format to one reader" (controls merge: the guide's turn_detection reads input:session and
vad:session). An event taken on a control edge is not also queued as data to that reader; it
still reaches other readers and the sink.

Not yet done: porting ``serving/realtime`` (listener.py, responder.py, reply_stream.py,
dialog.py, delivery.py) onto this runtime. It needs (1) the session to build a
``SessionGraph`` from ``embedded-cascade.yaml`` per connection, append each client audio unit
as a pcm16 chunk (``append`` returning False maps to a full-queue error) and client controls
(commit, configure, truncate, response.cancel as ``interrupt`` without a turn) as session
chunks; (2) an outbox sink that maps published chunks to realtime events (transcript ->
conversation.item.input_audio_transcription.*, text_delta -> response.output_text.delta,
pcm_f32le -> response.output_audio.delta as PCM16 at the negotiated rate, session ->
speech boundaries and the response lifecycle) and applies delivery pacing
(max_output_lead_ms, turn.done held until the audio's end, reply.delivered back to the dialog);
(3) the dialog to cut an interrupted reply at reply.delivered / truncate (reply.heard), and
the openai_* / realtime_transcription service nodes as adapters. The ``turn_detection``
adapter times held pauses on the input it has received, which is exact at real-time pace.
"""
