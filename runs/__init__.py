"""The run store and the runbook: layout, selection, phase orchestration, server lifecycle."""
