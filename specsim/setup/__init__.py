"""The setup stage: a SimConfig resolved, once and in one place, into what a run needs (issue 25).

- `deployment.Deployment`: hardware, stack, TP, target and draft (or head) profiles, their cost models, memory, c.
- `run.resolve(cfg) -> RunSetup`: the deployment, workload, acceptance source, step costs, the γ policy with its
  bands worked out, memory, and the engine profile with the engine path it takes and why.

Layering: setup sits above engine (it builds engine objects) and below simulate (which runs a RunSetup and
summarizes it); see tests/test_architecture.py.
"""
