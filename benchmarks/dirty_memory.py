"""A pytest plugin that leaves random bytes in the CUDA caching allocator's free blocks before any
test runs: ``pytest -s -p benchmarks.dirty_memory -m gpu ...``.

A fresh process's first allocations come from new device memory, which is usually zero; in a
process where other tests ran first they come from blocks those tests wrote. A result that reads
memory nothing wrote (an ``empty`` tensor, a graph's intermediate) repeats itself in the first and
may not in the second. With this plugin a test alone in a process gets the second kind: blocks of
random bytes (bfloat16 and float32 NaNs and infinities among them) in both of the allocator's
pools, so such a read shows. A diagnostic for docs/gpu.md (``gpu_suite.sh OUT bisect``); it
changes no code under test.
"""

from __future__ import annotations

import torch

LARGE = 1 << 30  # bytes a block of the large pool
SMALL = 512 << 10  # bytes a block of the small pool (blocks of 1 MiB or less)


def pytest_sessionstart(session) -> None:
    if not torch.cuda.is_available():
        return
    free, _ = torch.cuda.mem_get_info()
    large = [
        torch.randint(0, 256, (LARGE,), dtype=torch.uint8, device="cuda")
        for _ in range(int(free * 0.7) // LARGE)
    ]
    small = [torch.randint(0, 256, (SMALL,), dtype=torch.uint8, device="cuda") for _ in range(2048)]
    torch.cuda.synchronize()
    print(
        f"[dirty] {len(large)} GiB and {len(small) * SMALL >> 20} MiB of random bytes left in "
        f"the caching allocator's free blocks",
        flush=True,
    )
    del large, small  # back to the allocator's cache, not to the device
