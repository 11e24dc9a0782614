"""Pure metric code over exported trees and transcripts.

- ``asr_phase`` / ``asr_v15``: the v1.0 and v1.5 ASR phase drivers (official-schema transcripts,
  ``asr.json`` receipts with the backend identity).
- ``v10_unified``: the unified v1.0 metrics (``unified.json``, ``unified-samples.jsonl``).
- ``v10_official`` (+ ``v10_backchannel``): the official v1.0 takeover, latency and backchannel
  rules, reimplemented clean-room (``official.json``).
- ``v10_evaluator``: runs the original evaluator from a sha256-verified checkout
  (``evaluator.json``).
- ``v15_timing``: v1.5 stop and response intervals and their pooled summary.

Scorers read files written by earlier phases and write their own; they never talk to servers
and never write reports. The records they write (and reports reads) are in ``fdb.records``.
"""
