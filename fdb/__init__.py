"""fdb: benchmark and evaluation harness for real-time spoken dialogue and streaming TTS."""

__version__ = "0.1.0"
