"""The engine: requests (`workload`), acceptance draws (`acceptance`; the per-step draw `draws`), γ policies
(`policies`, one strategy object per file), the step-by-step engine of record (`simpy_engine`: its replicas' loop,
on the plain event queue of `events`, with its two step kernels in `kernels`), the same closed loop computed in
iteration space where that is exact (`closed`), the exact batch-1 fast path (`fastpath`), records and summaries
(`metrics`), and how a serving engine schedules a step (`engine_profiles`)."""
