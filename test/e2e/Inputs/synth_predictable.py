"""Checks the synthetic up projections of bench/gpu/opt_synth.py: with
--predictable R:A a rank-R predictor of the pre-activations (the top R
directions of X W on training rows, a 3.1-sigma margin per neuron, as the
compiler's predictor training does) finds the active neurons at a density
close to the actual one; with the default i.i.d. weights it cannot.

  synth_predictable.py BENCH_GPU_DIR
"""
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
import opt_synth  # noqa: E402

for pred in ((32, 0.01), None):
    cfg = dict(opt_synth.SHAPES["125m"])
    if pred:
        cfg["pred"] = pred
    w = opt_synth._make("l0.w1", cfg, 0.1)
    b = opt_synth._make("l0.b1", cfg, 0.1)
    x = np.random.default_rng(0).standard_normal((3000, cfg["d"])).astype(np.float32)
    h = x @ w
    train, test = h[:2000], h[2000:]
    _, _, vt = np.linalg.svd(train, full_matrices=False)
    basis = vt[:32].T
    approx = test @ basis @ basis.T
    sigma = (train - train @ basis @ basis.T).std(0)
    active = test + b > 0
    predicted = approx + b + 3.1 * sigma > 0
    recall = (predicted & active).sum() / active.sum()
    print(f"{'predictable %d:%g' % pred if pred else 'i.i.d.'}: pre-activation "
          f"variance {h.var(0).mean():.2f}, actual density {active.mean():.3f}, "
          f"rank-32 predictor recall {recall:.4f} at density {predicted.mean():.3f}")
