"""What every engine of the server shares about a spoken conversation, below the protocol layer
(``serving.realtime``) and the engines (``serving.graph``, ``serving.duplex``):

- ``chunker``: a reply's text cut into speakable chunks (``SpeechChunker``, ``speakable``);
- ``end_of_turn``: the semantic end-of-turn rule (Smart Turn's score -> the silence that ends a
  turn, ``HeldPause``, ``CANDIDATE_MS``);
- ``dialog``: a session's conversation history and how much of each reply it keeps (what was
  heard), used by the graph's dialog node.
"""
