"""The median of the training logs' tokens_per_s lines: python medians.py causal.train.log prefix_lm.train.log"""
import re, statistics, sys
for path in sys.argv[1:]:
    values = [float(m.group(1)) for line in open(path) if "[train]" in line and (m := re.search(r"tokens_per_s ([\d.]+)", line))]
    print(f"{path}: median tokens_per_s {statistics.median(values)} over {len(values)} lines")
