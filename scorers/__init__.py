"""Pure metric code over exported trees and transcripts.

- ``asr_phase``: the v1.0 ASR phase driver (output.json per sample, asr.json receipt).
- ``v10_unified``: the unified v1.0 metrics (``unified.json``, ``unified-samples.jsonl``).
- ``v10_official``: the official v1.0 takeover and latency rules, reimplemented clean-room.
- ``v15_timing``: v1.5 stop and response intervals and their pooled summary.

Scorers read files written by earlier phases and write their own; they never talk to servers
and never write reports.
"""
