"""Print the seqkit-train overrides that rebuild a checkpoint's task, model and criterion (to go on
training it on other data: ULMFiT's middle stage). Usage: python from_checkpoint.py CHECKPOINT"""

import sys

from seqkit.cli.common import yaml_value
from seqkit.core import checkpoints

cfg = checkpoints.load(sys.argv[1])["cfg"]
out = []
for group in ("task", "model", "criterion"):
    values = dict(cfg[group])
    out.append(f"{group}={values.pop('name')}")
    for key, value in values.items():
        if group == "task" and key == "data":
            continue
        if not isinstance(value, dict):
            out.append(f"{group}.{key}={yaml_value(value)}")
print(" ".join(out))
