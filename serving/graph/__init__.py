"""The session graph (the guide's "Session Graph"): nodes with typed streams, control edges,
turn ids on every chunk, interruption fencing and bounded edges.

- ``streams``: the stream vocabulary (pcm16, pcm_f32le, image_frame, transcript, messages,
  text_delta, text, tool_call, tool_response, session), typed payloads, ``Chunk`` and the
  control types.
- ``registry``: the one registry of backends by role (transcription, chat, speech, vad, turn,
  dialog, native): each kind's options, formats, turn role and node class (or, for a launch
  file's ``backends:``, its backend class), and the stages a ``stages: [...]`` route may name
  (vad, turn_detection); ``kinds``: the options classes of the graph kinds.
- ``declare``: ``load_graph(mapping | yaml)`` parses and validates ``session_nodes`` +
  ``session_publish`` with the guide's error messages; the result is a ``GraphDecl``.
- ``runtime``: ``SessionGraph`` runs a ``GraphDecl`` over ``Node`` adapters in asyncio and
  publishes to a sink (``PublishSink`` by default; anything with ``put/purge/fail/close``; one
  with ``holds_turn_done`` paces delivery and ``release()``s what it held).
- ``nodes``: adapters over the embedded models (Silero VAD and Smart Turn stages,
  whisper_transcription, llama_chat, piper_speech) and ``build_nodes``; ``dialog_node``: the
  dialog (turns, interruption, the history kept of each reply).
- ``embedded-cascade.yaml``: the bundled embedded-cascade as a declaration.

Every system is a session graph, and every session runs its graph on ``runtime``. A graph
speaks one session protocol (``GraphDecl.protocol``): a native system's graph is one node of a
``native`` kind (``duplex_baseline``, ``moshi_gpu``), which is the whole session: the native
session (``serving.duplex.session``) feeds it the accepted audio, and the node
(``serving.duplex.node.NativeNode``, the kind's unit loop) sends that session's events; every
other graph runs behind the turn-based session.

Declaration format: docs/formats.md, "Session graph".

Rules of the guide not enforced (they concern kinds fdb does not have): the alignment kind's
reply.progress as data vs control, forced/asr alignment options, and the service and
command-line override rules; the reply.delivered rule checks that an audio-publishing node
takes the dialog's interrupt and that the dialog reads its session. ``session`` is exempt from "two
nodes never send the same format to one reader" (controls merge: the guide's turn_detection reads
input:session and vad:session). An event taken on a control edge is not also queued as data to that
reader; it still reaches other readers and the sink.

In the server: every ``/v1/realtime`` session of ``embedded-cascade`` runs on a
``SessionGraph`` of ``embedded-cascade.yaml`` (``serving.realtime.graph_session``): each accepted
client append is a pcm16 chunk (a full input edge refuses it), session.update a ``configure``,
commit a ``commit``, conversation.item.truncate a ``truncate`` of the reply's turn and
response.cancel an ``interrupt`` without a turn. Its sink (``serving.realtime.graph_output``)
maps the published chunks to realtime events and paces the reply audio (max_output_lead_ms):
it holds the speech node's turn.done until the audio has played and then releases it to the
dialog, and it reports reply.delivered (the audio sent and played) when a started reply is
interrupted; the dialog keeps what was heard (``serving.conversation.dialog``'s rules) and answers
with reply.heard. The openai_* / realtime_transcription service nodes have no graph adapter: a
system whose backends are service nodes runs the same graph over the service clients the server
loaded (they take the embedded models' calls). The ``turn_detection`` adapter times held pauses
on the input it has received, which is exact at real-time pace.
"""
