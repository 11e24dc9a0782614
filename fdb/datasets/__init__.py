"""Dataset records and loaders (official Full-Duplex-Bench layouts and fdb's synthetic sets).

- ``types``: ``V10Sample``, ``V15Pair``, ``SampleProblem`` and the subset names.
- ``official``: ``load_v10``, ``load_v15``, ``list_ids`` for the official trees.
- ``annotations``: parsing and validation of pause/turn-taking/interrupt/metadata JSON.
- ``selection``: the runbook's sample-selection rules (``SelectionSpec``, ``select``).
- ``pinning``: ``inventory``, ``tree_revision``, ``write_revision``.
- ``synthetic``: ``generate_synthetic``, ``ensure_synthetic`` (Piper-voiced, license-free).
"""
