import re, statistics as st, sys
W='/work/runs/pinit/W'
def bleu(step):
    t=open(f'{W}/{step}/test/score.txt').read(); return float(re.search(r'BLEU = ([\d.]+)', t).group(1))
def best(step):
    rows=[(int(m.group(1)), float(m.group(2))) for m in re.finditer(r'\[valid\] epoch \d+ \| update (\d+) \| loss ([\d.]+)', open(f'{W}/logs/{step}.log').read())]
    lo=min(l for _,l in rows); u=[u for u,l in rows if l==lo][0]
    return f'{lo} ({u})'
def wall(step):
    return int(re.findall(r'train_wall (\d+)', open(f'{W}/logs/{step}.log').read())[-1])
out={}
for k,init in (('R','random'),('X','xlm'),('M','mass')):
    steps=[f'ft-{init}-data-bin-10', f'ft-{init}-data-bin-10-seed2', f'ft-{init}-data-bin-10-seed3']
    b=[bleu(s) for s in steps]
    out[k+'2']=f'{b[1]:.2f}'; out[k+'3']=f'{b[2]:.2f}'
    out[k+'M']=f'{st.mean(b):.2f} ± {st.stdev(b):.2f}'
    out[k+'V2']=best(steps[1]); out[k+'V3']=best(steps[2])
    print(init, b, out[k+'M'], [best(s) for s in steps], [wall(s) for s in steps])
print(out)
import json; json.dump(out, open('/work/runs/pinit/fill.json','w'))
