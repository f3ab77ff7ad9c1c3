# The held-out split of a GLUE task's train, set in one place; sourced by the recipes that carve it
# (classification/run.sh, transfer/finetune.sh, distillation/sst2/run.sh). CARVE= and CARVE_UNIT= in
# the environment win over these defaults.
# SST-2's training rows are every phrase of 6,885 sentences, so a carve by rows holds out phrases
# whose sentences stay in train; since 2026-11-27 (decided on the held-out split's make-up: length,
# unknown words, whole sentences as dev has; docs/classification-tagging.md) SST-2 holds out 10% of
# its sentences whole (carve_unit=sentence). Other tasks (RTE, MRPC): a seeded 5% of the rows.
# The SST-2 tables of 2026-11-27 were carved by rows: CARVE=0.05 CARVE_UNIT=example gives them again.
carve_defaults() {  # carve_defaults TASK: sets CARVE and CARVE_UNIT where the caller left them unset
  if [[ $1 == sst2 ]]; then CARVE_UNIT="${CARVE_UNIT:-sentence}"; else CARVE_UNIT="${CARVE_UNIT:-example}"; fi
  if [[ $CARVE_UNIT == sentence ]]; then CARVE="${CARVE:-0.1}"; else CARVE="${CARVE:-0.05}"; fi
}
