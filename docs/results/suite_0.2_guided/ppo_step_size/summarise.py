import json,glob,sys,statistics as s
def runs(pat):
    out=[]
    for d in sorted(glob.glob(pat)):
        try: e=json.load(open(d+'/eval.json'))
        except Exception: continue
        if 'after' not in e: continue
        rows=[json.loads(l) for l in open(d+'/metrics.jsonl')]
        rows=[r for r in rows if 'success' in r and 'entropy' in r]
        out.append((e['before']['success'],e['after']['success'],rows))
    return out
def line(name,pat):
    rs=runs(pat)
    if not rs: print(name,'none'); return
    b=s.mean(r[0] for r in rs); a=[r[1] for r in rs]
    def first_last(k,n=5):
        return s.mean(s.mean(r[k] for r in rows[:n]) for _,_,rows in rs), s.mean(s.mean(r[k] for r in rows[-n:]) for _,_,rows in rs)
    ts=first_last('success'); pb=first_last('label_marginal_kl_uniform',3); en=first_last('entropy',3)
    print(f"{name:28s} n={len(rs)} before {b:.2f} after {s.mean(a):.2f} seeds {' '.join(f'{x:.2f}' for x in a)} | train succ first5 {ts[0]:.2f} last5 {ts[1]:.2f} | posbias {pb[0]:.2f}->{pb[1]:.2f} | ent {en[0]:.2f}->{en[1]:.2f}")
for name,pat in [a.split('=',1) for a in sys.argv[1:]]:
    line(name,pat)
