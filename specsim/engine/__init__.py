"""The engine: requests (`workload`), acceptance draws (`acceptance`; the per-step draw `draws`), γ policies
(`policies`, one strategy object per file), the step-by-step engine of record (`simpy_engine`: the arrival process,
the router (`routers`) and one loop per replica as SimPy processes, with its two step kernels in `kernels`; a user
may add processes of their own), the same closed loop computed in
iteration space where that is exact (`closed`), the exact batch-1 fast path (`fastpath`), records and summaries
(`metrics`), and how a serving engine schedules a step (`engine_profiles`)."""
