"""fdb's semantic judge: interaction_handling, relevance and grounding per v1.5 pair, each
accept / fail / unresolved with a verified quote, behind a six-control gate."""
