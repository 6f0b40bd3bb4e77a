"""Profiles: what a chip, a software stack and a model are (`schema`), how they are found and read (`loader`),
and Hugging Face configs turned into model profiles (`hf_import`).

    from specsim import profiles
    h100 = profiles.hardware("h100-sxm"); llama = profiles.model("llama-3.1-8b"); st = profiles.stack(None)
"""

from specsim.profiles.loader import (HARDWARE_DIR, MODEL_DIR, REPO_ROOT, STACK_DIR, hardware, is_path, list_names,
                                     load_hardware, load_model, load_stack, load_toml, model, stack)
from specsim.profiles.schema import (DTYPE_BYTES, IDEAL_STACK, OVERLAPS, HardwareProfile, ModelProfile,
                                     StackProfile)

__all__ = ["DTYPE_BYTES", "HARDWARE_DIR", "IDEAL_STACK", "MODEL_DIR", "OVERLAPS", "REPO_ROOT", "STACK_DIR",
           "HardwareProfile", "ModelProfile", "StackProfile", "hardware", "is_path", "list_names", "load_hardware",
           "load_model", "load_stack", "load_toml", "model", "stack"]
