#!/usr/bin/env bash
# GLUE RTE from scratch (sentence pairs): prepare, train (config_bilstm: 526 updates, ~9 min on 2 cores), predict dev, score.
#   bash examples/classification/rte/run.sh [WORK_DIR] [CONFIG] [key=value ...]
# CONFIG: config_bilstm.yaml (default) or config_transformer.yaml in this folder; extra key=value
# settings go to seqkit-train.
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-rte-run}"
config="${2:-$here/config_bilstm.yaml}"
shift $(( $# > 2 ? 2 : $# ))
exec bash "$here/../run.sh" "$work" "$config" "$@"
