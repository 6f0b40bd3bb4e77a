"""What a pass costs: the roofline (`roofline`), measured tables (`measured`), fitting a stack to measurements
(`calibrate`, `calibrate_io`), and the per-step times the engine reads (`steptime`)."""
