"""The engine: requests (`workload`), acceptance draws (`acceptance`; the per-step draw `draws`), γ policies
(`policies`, one strategy object per file), the discrete-event engine (`simpy_engine`, with its two step kernels in
`kernels`) and its exact fast path (`fastpath`), records and summaries (`metrics`), and how a serving engine
schedules a step (`engine_profiles`)."""
