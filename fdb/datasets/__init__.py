"""Dataset records and loaders (official Full-Duplex-Bench and Seed-TTS layouts, fdb's synthetic
sets).

- ``types``: ``V10Sample``, ``V15Pair``, ``SampleProblem`` and the subset names.
- ``official``: ``load_v10``, ``load_v15``, ``list_ids`` for the official FDB trees.
- ``seedtts``: ``load_seedtts`` for the Seed-TTS test lists (``SeedTtsItem`` per row).
- ``annotations``: parsing and validation of pause/turn-taking/interrupt/metadata JSON.
- ``selection``: the runbook's sample-selection rules (``SelectionSpec``, ``select``).
- ``pinning``: ``inventory``, ``tree_revision``, ``write_revision``, ``sample_inventory``.
- ``synthetic``: ``generate_synthetic``, ``install_synthetic``, ``ensure_synthetic`` (Piper-voiced,
  license-free; builders in ``synth_v10``/``synth_v15``, voices in ``synth_voices``).
- ``install``: what ``python -m fdb setup`` does with official trees (verify, link, pin).
"""
