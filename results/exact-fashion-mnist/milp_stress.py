"""MILP stress on the 784-input network: the sampling stage reduced to 16 corners and the centre (samples=0,
no data points), so that every layer-1 unit not decided by interval/LP goes to the MILP (30 s per solve)."""
import json, sys, time
import torch
torch.set_num_threads(1)
from latopt.exact.mlp import load_mlp
from latopt.exact.network import Box
from latopt.exact.stability import compress
model, meta = load_mlp(sys.argv[1])
t0 = time.perf_counter()
comp, rep = compress(model, Box.uniform(784, 0, 1), samples=0, data=None, time_limit=30.0, seed=0, log=print)
r = rep.to_json()
solves = [m for layer in rep.analysis.layers for u in layer for m in u.milp]
r["milp_solves"] = {"count": len(solves), "max_seconds": max((m["seconds"] for m in solves), default=0),
                    "outcomes": {o: sum(m["outcome"] == o for m in solves) for o in ("impossible", "witness", "undecided")}}
r["wall_seconds"] = round(time.perf_counter() - t0, 2)
json.dump(r, open(sys.argv[2], "w"), indent=1)
print(json.dumps({k: r[k] for k in ("compression", "milp_solves", "seconds", "wall_seconds")}))
print(json.dumps(r["stability"]["layers"]))
