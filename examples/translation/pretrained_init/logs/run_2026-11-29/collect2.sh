# copy every step's log, score and test translations of W into the recipe's logs folder; results.tsv with seeds
W=/work/runs/pinit/W; D=/work/main/examples/translation/pretrained_init/logs/run_2026-11-29
mkdir -p $D && cp $W/logs/*.log $D/
{ printf 'init\tpairs\tupdates\tseed\ttest BLEU line\n'
for data in data-bin-10 data-bin; do U=$([[ $data == data-bin ]] && echo 1000 || echo 400)
  for init in random xlm mass bart; do
    for dir in $W/ft-$init-$data $W/ft-$init-$data-seed*; do
      f=$dir/test/score.txt; [[ -f $f ]] || continue
      step=$(basename $dir); seed=1; [[ $step == *-seed* ]] && seed=${step##*-seed}
      cp $f $D/score-${step#ft-}.txt; gzip -nc $dir/test/generate-test.txt > $D/generate-test-${step#ft-}.txt.gz
      printf '%s\t%s\t%s\t%s\t%s\n' $init $data $U $seed "$(grep -m1 BLEU $f)"
    done
  done; done; } > $D/results.tsv
cat $D/results.tsv
