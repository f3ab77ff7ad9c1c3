#!/usr/bin/env bash
# SST-2 from scratch: prepare, train one classifier (its config's update count: 6-18 min on 2 quiet cores),
# predict dev, score.
#   bash examples/classification/sst2/run.sh [WORK_DIR] [CONFIG] [key=value ...]
# CONFIG: config_dan.yaml, config_cnn.yaml, config_bilstm.yaml (default) or config_transformer.yaml
# in this folder; extra key=value settings go to seqkit-train.
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-sst2-run}"
config="${2:-$here/config_bilstm.yaml}"
shift $(( $# > 2 ? 2 : $# ))
exec bash "$here/../run.sh" "$work" "$config" "$@"
