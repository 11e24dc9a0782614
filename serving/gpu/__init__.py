"""GPU model nodes: torch/transformers models on CUDA, batched across sessions.

Every model here loads either a local checkpoint in the Hugging Face layout, verified against a
pinned ``SHA256SUMS`` file (:mod:`serving.weights`), or random weights made from a published
configuration (``load_format: dummy``) for capacity work. Dummy-weight numbers measure the compute
path only; they are labeled in every record and refused for quality or behavior metrics.
torch and transformers are imported only where a model is built (optional heavy dependencies).
"""
