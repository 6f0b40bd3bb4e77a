"""Questions answered with many simulations: the paper's comparison (`compare`) and choosing a draft (`choose`)."""
