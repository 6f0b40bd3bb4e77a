"""The engine: requests (`workload`), acceptance draws (`acceptance`), γ policies (`policies`), the discrete-event
engine (`simpy_engine`) and its exact fast path (`fastpath`), records and summaries (`metrics`), and how a serving
engine schedules a step (`engine_profiles`)."""
