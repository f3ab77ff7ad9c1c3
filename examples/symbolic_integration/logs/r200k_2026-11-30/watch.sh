#!/usr/bin/env bash
cd /work/runs/symbolic/t300k
until grep -q "saved .*(epoch 1," chain.log; do sleep 2; done
pkill -f "bash chain.sh"
sleep 1
pkill -f "seqkit-train --config" 
while pgrep -f "seqkit-train --config" >/dev/null; do sleep 1; done
echo "stopped $(date)"; grep "saved .*(epoch 1," chain.log
nohup bash chain_resume.sh >> chain.log 2>&1 &
