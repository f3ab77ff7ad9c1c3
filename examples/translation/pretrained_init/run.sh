#!/usr/bin/env bash
# Multi30k de->en from XLM, MASS and BART weights against a random start, on all pairs and on 10%:
# every command of README.md in order, each step's log in WORK/logs, test BLEU of each fine-tune in
# WORK/results.tsv. A step whose output is complete is not run again, so the same command goes on
# where a stopped run left off (a stopped seqkit-train resumes from its checkpoint_last.pt).
#   bash examples/translation/pretrained_init/run.sh WORK
# Update counts (README.md's plan; change them only for a smoke run): XLM=2000 MASS=1500 BART=1500
# FULL=1000 (fine-tuning on all pairs) LOW=400 (on 10%). THREADS=N: common.threads of every step (2).
# ONLY="STEP ..." runs those steps alone (pretrain-xlm, pretrain-mass, pretrain-bart, ft-INIT-DATA with INIT
# random|xlm|mass|bart and DATA data-bin|data-bin-10): two invocations with disjoint lists and THREADS=1 use
# two cores; the table is written by a run without ONLY once every step is done.
# SEED=N (1): the fine-tunes' common.seed (initialisation of what is not loaded, dropout, batch order); a seed
# other than 1 names its steps and folders ft-INIT-DATA-seedN (the pretraining runs once, with seed 1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
W="${1:?usage: run.sh WORK}"
XLM=${XLM:-2000}; MASS=${MASS:-1500}; BART=${BART:-1500}; FULL=${FULL:-1000}; LOW=${LOW:-400}
T=(common.threads="${THREADS:-2}")
S=${SEED:-1}; sfx=$([[ $S == 1 ]] || echo "-seed$S")
mkdir -p "$W/logs"
log() { echo "== $(date '+%F %T') $*" | tee -a "$W/logs/run.log"; }
# a step is done when its log says it reached its update count (a run stopped by a signal says otherwise;
# logs are appended, so a resumed run's log follows the stopped one's)
done_train() { [[ -f $1 ]] && grep -q "done: reached max_update" "$1"; }
want() { [[ -z ${ONLY:-} || " $ONLY " == *" $1 "* ]]; }

log "start: XLM=$XLM MASS=$MASS BART=$BART FULL=$FULL LOW=$LOW SEED=$S ${T[*]}"
[[ -f $W/data-bin/preprocess.json ]] || bash "$here/../multi30k/prepare.sh" "$W/data-bin" > "$W/logs/prepare.log" 2>&1
[[ -d $W/data-bin-10 ]] || python "$here/carve.py" "$W/data-bin" "$W/data-bin-10" --share 0.1 --seed 1 \
  > "$W/logs/carve.log" 2>&1

pretrain() {  # NAME CONFIG DATA UPDATES
  want "pretrain-$1" || return 0
  done_train "$W/logs/pretrain-$1.log" && return 0
  log "pretrain $1 ($4 updates)"
  seqkit-train --config "$here/$2" task.data="$3" checkpoint.save_dir="$W/$1" optimization.max_update="$4" \
    "${T[@]}" >> "$W/logs/pretrain-$1.log" 2>&1
}
pretrain xlm pretrain_xlm.yaml "$W/data-bin" "$XLM"
pretrain mass pretrain_mass.yaml "$W/data-bin" "$MASS"
if want pretrain-bart && [[ ! -f $W/lm-bin/preprocess.json ]]; then  # BART reads both languages' sides as one text, XLM's pieces
  raw=$(python "$here/../../corpus.py" multi30k)
  side() { if [[ -f $raw/$1 ]]; then cat "$raw/$1"; else zcat "$raw/$1.gz"; fi; }  # shared data keeps them gzipped
  { side train.de; side train.en; } > "$W/mono.train"
  { side val.de; side val.en; } > "$W/mono.valid"
  seqkit-preprocess task=language_modeling trainpref="$W/mono.train" validpref="$W/mono.valid" \
    vocab_from="$W/xlm/checkpoint_last.pt" destdir="$W/lm-bin" workers=2 > "$W/logs/preprocess-lm.log" 2>&1
fi
pretrain bart pretrain_bart.yaml "$W/lm-bin" "$BART"

finetune() {  # INIT DATA UPDATES CONFIG [overrides...]
  local init=$1 data=$2 updates=$3 config=$4; shift 4
  local step="ft-$init-$data$sfx"; local dir="$W/$step"
  want "$step" || return 0
  if ! done_train "$W/logs/$step.log"; then
    log "fine-tune $init on $data ($updates updates, seed $S)"
    seqkit-train --config "$here/$config" task.data="$W/$data" optimization.max_update="$updates" \
      checkpoint.save_dir="$dir" common.seed="$S" "${T[@]}" "$@" >> "$W/logs/$step.log" 2>&1
  fi
  if [[ ! -f $dir/test/score.txt ]]; then
    seqkit-generate path="$dir/checkpoint_best.pt" task.data="$W/data-bin" gen_subset=test generation.beam=5 \
      results_path="$dir/test" "${T[@]}" > "$W/logs/generate-${step#ft-}.log" 2>&1
    seqkit-score hyp="$dir/test/generate-test.txt" > "$dir/test/score.tmp" 2> "$W/logs/score-${step#ft-}.log"
    mv "$dir/test/score.tmp" "$dir/test/score.txt"
  fi
}
for data in data-bin-10 data-bin; do  # the cheaper low-resource runs first
  U=$([[ $data == data-bin ]] && echo "$FULL" || echo "$LOW")
  finetune random "$data" "$U" finetune.yaml model.num_langs=0
  finetune xlm "$data" "$U" finetune_xlm.yaml model.init_from="$W/xlm/checkpoint_last.pt"
  finetune mass "$data" "$U" finetune.yaml model.init_from="$W/mass/checkpoint_last.pt"
  finetune bart "$data" "$U" finetune.yaml model.num_langs=0 model.init_from="$W/bart/checkpoint_last.pt"
done

[[ -z ${ONLY:-} ]] || { log "done: $ONLY"; exit 0; }
{ printf 'init\tpairs\tupdates\tseed\ttest BLEU line\n'
  for data in data-bin data-bin-10; do
    U=$([[ $data == data-bin ]] && echo "$FULL" || echo "$LOW")
    for init in random xlm mass bart; do
      for dir in "$W/ft-$init-$data" "$W/ft-$init-$data"-seed*; do  # seed 1, then the others run (SEED=N)
        [[ -d $dir ]] || continue
        seed=1; [[ $dir == *-seed* ]] && seed=${dir##*-seed}
        printf '%s\t%s\t%s\t%s\t%s\n' "$init" "$data" "$U" "$seed" "$(grep -m1 BLEU "$dir/test/score.txt")"
      done
    done
  done; } > "$W/results.tsv"
log "done: $W/results.tsv"
cat "$W/results.tsv"
