#!/usr/bin/env python3
"""Every shipped model on the CUDA target, against the references.

Two stages, so that the compiler and the GPU may live on different machines:

  gpu_models.py prepare --sparsec build/bin/sparsec --models ../shared/models --out DIR
      compiles each configuration with --target cuda --compile-to=emit
      (model.cu + weights, one copy per distinct pack), the references the
      checks need (shipped ones, ONNX Runtime at other shapes, an x86
      build's top-1 on held-out text), so DIR is all the GPU machine needs
  gpu_models.py run --dir DIR [--nvcc NVCC] [--no-build] [--runtime-lib LIB]
      builds the runtime and every model.cu with nvcc (sm_90), runs the
      checks and prints "PASS ..." / "FAIL ..." lines and "N passed, M failed";
      --runtime-lib takes libsparsec_runtime.a and libsparsec_runtime_cuda.a
      from LIB (a CMake build's lib/, built where the compiler is) instead of
      building them, which takes minutes of one core for Pit.cu alone.

Checks (tolerances: fp32 as on x86; fp16 weights looser, with the top-1
agreement also reported):
  * MLPs against their ONNX Runtime outputs;
  * convolutional networks (gen cases cnn, mobile_cnn, conv_mix at batch 3;
    bench/bench_cnn.py's plain, plain_bn and mobile) against ONNX Runtime,
    fp32, and conv_mix, plain, plain_bn and mobile with fp16 weights;
  * opt-byte-s (both no-cache exports, the KV-cache export) against
    ref_logits.npy / ref_kv_step.npz, and against ONNX Runtime at other shapes;
  * exact sparsity: sparse == dense on the GPU, and greedy 64 bytes equal to
    ref_greedy_64.bin (KV cache and no-cache), dense too;
  * predicted sparsity: greedy agreement with the reference (reported);
  * generated decoders (gen_onnx_models.py: LLaMA-style with rotary
    embeddings and grouped-query attention, gated and squared-ReLU MLPs,
    Falcon-style parallel attention and MLP with one key/value head):
    greedy ids as ONNX Runtime's, and the rotary and Falcon builds' logits
    and presents against ONNX Runtime on random ids;
  * CUDA graphs: `model eval` over 128-byte chunks (one signature, so
    replays from the third chunk on) agrees with the x86 build's top-1;
    hybrid builds decode the same bytes with graph segments as eagerly;
  * the default (every kernel kind launched early) decodes the same bytes as
    the dense GEMVs launched normally (SPARSEC_CUDA_PDL=small,sparse), no
    early launch at all (SPARSEC_CUDA_PDL=0), one graph a step
    (SPARSEC_CUDA_SPLIT=0), attention merged through memory
    (SPARSEC_CUDA_ATTN_CLUSTER=0), the cached past read after the
    attention's wait (SPARSEC_CUDA_ATTN_PREFETCH=0) and greedy picks on the
    host (SPARSEC_CUDA_ARGMAX=0) and each decode step waited for
    (SPARSEC_CUDA_AHEAD=0; by default a step is launched ahead, its ids the
    device's picks); the default's steps must be replayed; the predicted
    builds decode the same bytes with the norm kernel of its own
    (SPARSEC_CUDA_NORM_FUSE=0) as with the norm in the predictor's kernel.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EVAL_CHUNKS = 32

# name -> (model, extra compile args, profile needed)
CONFIGS = {
    "alexa": ("mlp/alexa_v0.1.onnx", [], False),
    "alexa_f16": ("mlp/alexa_v0.1.onnx", ["--weights=f16"], False),
    "rhasspy": ("mlp/hey_rhasspy_v0.1.onnx", [], False),
    "nc17": ("opt-byte-s/model_nocache_opset17.onnx", [], False),
    "nc14": ("opt-byte-s/model_nocache_opset14.onnx", [], False),
    "nc17_f16": ("opt-byte-s/model_nocache_opset17.onnx", ["--weights=f16"], False),
    "kv": ("opt-byte-s/model_kvcache_opset17.onnx", [], False),
    "kv_f16": ("opt-byte-s/model_kvcache_opset17.onnx", ["--weights=f16"], False),
    "nc17_exact": ("opt-byte-s/model_nocache_opset17.onnx", ["--sparsity=exact"], True),
    "kv_exact": ("opt-byte-s/model_kvcache_opset17.onnx", ["--sparsity=exact"], True),
    "kv_pred": ("opt-byte-s/model_kvcache_opset17.onnx", ["--sparsity=predicted"], True),
    # The no-cache export with the compiler-derived KV cache (--kv-cache).
    "nc17_kv": ("opt-byte-s/model_nocache_opset17.onnx", ["--kv-cache"], False),
    "kv_pred_f16": ("opt-byte-s/model_kvcache_opset17.onnx",
                    ["--sparsity=predicted", "--weights=f16"], True),
    # PIT micro-tiles for the batched (prompt) calls of the down projections.
    "nc17_pit": ("opt-byte-s/model_nocache_opset17.onnx",
                 ["--sparsity=exact", "--weights=f16", "--pit-tile=32"], True),
    # 256 output columns a block: two warpgroups a block on Hopper.
    "nc17_pit256": ("opt-byte-s/model_nocache_opset17.onnx",
                    ["--sparsity=exact", "--weights=f16", "--pit-tile=32",
                     "--pit-columns=256"], True),
    "kv_pit": ("opt-byte-s/model_kvcache_opset17.onnx",
               ["--sparsity=exact", "--weights=f16", "--pit-tile=16"], True),
    # Every layer norm folded into the decode GEMVs it feeds.
    "kv_fold": ("opt-byte-s/model_kvcache_opset17.onnx", ["--fold-norms"], False),
    "kv_f16_fold": ("opt-byte-s/model_kvcache_opset17.onnx",
                    ["--fold-norms", "--weights=f16"], False),
    # bfloat16 weights: dense, exact-sparse (the split and general kernels)
    # and predicted builds.
    "nc17_bf16": ("opt-byte-s/model_nocache_opset17.onnx", ["--weights=bf16"], False),
    "kv_bf16": ("opt-byte-s/model_kvcache_opset17.onnx", ["--weights=bf16"], False),
    "kv_exact_bf16": ("opt-byte-s/model_kvcache_opset17.onnx",
                      ["--sparsity=exact", "--weights=bf16"], True),
    "kv_pred_bf16": ("opt-byte-s/model_kvcache_opset17.onnx",
                     ["--sparsity=predicted", "--weights=bf16"], True),
    # PIT on bfloat16 weights (bf16 tensor-core tiles).
    "nc17_pit_bf16": ("opt-byte-s/model_nocache_opset17.onnx",
                      ["--sparsity=exact", "--weights=bf16", "--pit-tile=32"], True),
    "kv_pit_bf16": ("opt-byte-s/model_kvcache_opset17.onnx",
                    ["--sparsity=exact", "--weights=bf16", "--pit-tile=16"], True),
}
# Hybrid builds: name -> (model, extra args, share of the FFN weights the GPU
# budget leaves room for, beyond what must live on the GPU). --sync-us 0 lets
# this small model's layers split.
HYBRID = {
    "kv_hy0": ("opt-byte-s/model_kvcache_opset17.onnx", ["--sparsity=exact"], 0.0),
    "kv_hy30": ("opt-byte-s/model_kvcache_opset17.onnx",
                ["--sparsity=exact", "--sync-us=0"], 0.3),
    "kv_hy100": ("opt-byte-s/model_kvcache_opset17.onnx", ["--sparsity=exact"], 1.0),
    "kv_hy30_pred": ("opt-byte-s/model_kvcache_opset17.onnx",
                     ["--sparsity=predicted", "--sync-us=0"], 0.3),
    "kv_offload30": ("opt-byte-s/model_kvcache_opset17.onnx",
                     ["--sparsity=off", "--placement=layers"], 0.3),
    "nc17_hy30": ("opt-byte-s/model_nocache_opset17.onnx",
                  ["--sparsity=exact", "--sync-us=0"], 0.3),
    # fp16 weights on both devices (the CPU parts' x86 kernels convert them
    # as they load), split and layer offload.
    "kv_hy30_f16": ("opt-byte-s/model_kvcache_opset17.onnx",
                    ["--sparsity=exact", "--sync-us=0", "--weights=f16"], 0.3),
    "kv_offload30_f16": ("opt-byte-s/model_kvcache_opset17.onnx",
                         ["--sparsity=off", "--placement=layers", "--weights=f16"], 0.3),
}
FFN_BYTES = 8404992  # opt-byte-s: 4 x 1024 neurons x (2 x 256 x 4 + 4) bytes
# Builds of generated models (test/Frontend/ONNX/gen_onnx_models.py CASE):
# name -> (case, extra compile args; with --sparsity, profiled on
# opt-byte-s's calib.txt first). A ReLU-fied LLaMA-style layer (rotary
# embeddings from position_ids) with and without a KV cache, and two-layer
# gated-MLP (and squared-ReLU) decoders whose gates are 70-75 % at 0, dense,
# exact and predicted; generate's greedy ids against ONNX Runtime's
# (test/e2e/Inputs/ort_greedy.py).
HYBRID_GATED = ["--target=hybrid", "--group-size=8", "--sync-us=0"]
GENERATED = {
    "rope_kv": ("rope_decoder_kv", []),
    "rope_nc": ("rope_decoder", []),
    "rope_nc_kv": ("rope_decoder", ["--kv-cache"]),
    # Grouped-query attention: 4 query heads over 2 cached key/value heads.
    "rope_gqa_kv": ("rope_decoder_gqa_kv", []),
    # Heads of 16: the rotary kernel's float4 path.
    "rope_h16_kv": ("rope_decoder_h16_kv", []),
    # Falcon-style: parallel attention and MLP, one cached key/value head
    # picked from a fused q/k/v projection, a ReLU MLP 60-70 % at 0.
    "falcon_kv": ("falcon_decoder_kv", []),
    "falcon_nc_kv": ("falcon_decoder", ["--kv-cache"]),
    "falcon_kv_exact": ("falcon_decoder_kv", ["--sparsity=exact"]),
    "falcon_kv_pred": ("falcon_decoder_kv", ["--sparsity=predicted"]),
    # Falcon-40B's layout: keys and values broadcast over their group's
    # query heads on the device (Expand), a cache of all 8 heads.
    "falcon40_kv": ("falcon40_decoder_kv", []),
    # Exported without a cache: the attention reads the 2 group heads
    # (sparsec-group-kv-heads), and the derived cache holds 2 heads.
    "falcon40_nc": ("falcon40_decoder", []),
    "falcon40_nc_kv": ("falcon40_decoder", ["--kv-cache"]),
    "gated_kv": ("gated_lm_kv", []),
    "gated_kv_exact": ("gated_lm_kv", ["--sparsity=exact"]),
    "gated_kv_pred": ("gated_lm_kv", ["--sparsity=predicted"]),
    "gated_nc_exact": ("gated_lm", ["--sparsity=exact"]),
    # No attention_mask: the derived cache's attentions are causal.
    "gated_nc_kv_exact": ("gated_lm", ["--kv-cache", "--sparsity=exact"]),
    "relu2_kv_exact": ("relu2_lm", ["--sparsity=exact"]),
    "relu2_kv_pred": ("relu2_lm", ["--sparsity=predicted"]),
    # Hybrid: both FFNs split (groups of 8 neurons, about half of the FFN
    # weights' room beyond what must live on the GPU), gateMask/gatedFfn on
    # the GPU part, the x86 ops on the CPU part.
    "gated_kv_hy_exact": ("gated_lm_kv", HYBRID_GATED + ["--gpu-budget=67686448",
                                                         "--sparsity=exact"]),
    "gated_kv_hy_pred": ("gated_lm_kv", HYBRID_GATED + ["--gpu-budget=67686448",
                                                        "--sparsity=predicted"]),
    "relu2_kv_hy_exact": ("relu2_lm", HYBRID_GATED + ["--gpu-budget=67680000",
                                                      "--sparsity=exact"]),
}
# Convolutional networks (checked against ONNX Runtime on random inputs):
# name -> (source, symbolic dims, extra compile flags). A gen_onnx_models.py
# case, or bench/bench_cnn.py's "plain" (224 x 224, im2col over 12544
# positions), "plain_bn" (with batch norms, computed with the convolutions)
# and "mobile" (depthwise and pointwise convs to 256 channels); the *_f16
# builds store fp16 weights (tensor-core GEMMs, fp32 accumulation).
CNNS = {
    "cnn": ("gen:cnn", {}, []),
    "mobile_cnn": ("gen:mobile_cnn", {}, []),
    "conv_mix": ("gen:conv_mix", {"n": 3}, []),
    "cnn_plain": ("bench:plain", {}, []),
    "cnn_plain_bn": ("bench:plain_bn", {}, []),
    "cnn_mobile": ("bench:mobile", {}, []),
    "conv_mix_f16": ("gen:conv_mix", {"n": 3}, ["--weights=f16"]),
    "cnn_plain_f16": ("bench:plain", {}, ["--weights=f16"]),
    "cnn_plain_bn_f16": ("bench:plain_bn", {}, ["--weights=f16"]),
    "cnn_mobile_f16": ("bench:mobile", {}, ["--weights=f16"]),
    "conv_mix_bf16": ("gen:conv_mix", {"n": 3}, ["--weights=bf16"]),
    "cnn_mobile_bf16": ("bench:mobile", {}, ["--weights=bf16"]),
}
# Tolerances of the fp16 builds (as for the language models' fp16 builds).
CNN_F16_TOL = (2e-2, 5e-2)
# bfloat16 keeps 8 bits of mantissa to fp16's 11: eight times the rounding.
CNN_BF16_TOL = (1e-1, 2e-1)
BF16_TOL = (1e-1, 2e-1)
# What each generated build's extra runs change.
ENV_LABELS = {("SPARSEC_CUDA_AHEAD",): " (each step waited for)",
              ("SPARSEC_CUDA_GATED_FUSE",): " (the gated MLP's three ops apart)"}
ROPE_PROMPTS = {"p1": [[3, 1, 4, 1, 5]], "p2": [[3, 1, 4, 1, 5], [2, 7, 1, 8, 2]]}
ROPE_TOKENS = 40


def sh(cmd, **kw):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, **kw)


def wanted(args, name):
    """Whether `prepare --only` selects build `name` (base, hybrid, generated
    or names)."""
    if not args.only:
        return True
    sets = {"base": set(CONFIGS), "hybrid": set(HYBRID), "generated": set(GENERATED)}
    chosen = set()
    for item in args.only.split(","):
        chosen |= sets.get(item, {item})
    return name in chosen


def save_case(out, case, inputs, refs):
    """A check's inputs and expected outputs as .npy files plus a manifest."""
    import json
    d = os.path.join(out, "cases", case)
    os.makedirs(d, exist_ok=True)
    manifest = {"inputs": {}, "refs": {}}
    for kind, arrays in (("inputs", inputs), ("refs", refs)):
        for i, (name, a) in enumerate(arrays.items()):
            f = f"{kind}_{i}.npy"
            np.save(os.path.join(d, f), a)
            manifest[kind][name] = f
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(manifest, f)


def prepare(args):
    import hashlib
    import onnx
    import onnxruntime as ort
    sys.path.insert(0, HERE)
    from e2e_check import gen_inputs

    os.makedirs(args.out, exist_ok=True)
    mdl = args.models
    opt = os.path.join(mdl, "opt-byte-s")
    prof = {}
    tmp = tempfile.mkdtemp(prefix="sparsec-gpu-models-")

    def prof_for(model):
        return prof[model]
    for model in {c[0] for c in CONFIGS.values() if c[2]} | {h[0] for h in HYBRID.values()}:
        p = os.path.join(tmp, os.path.basename(model) + ".sprof")
        sh([args.sparsec, "profile", os.path.join(mdl, model), "--calib",
            os.path.join(opt, "calib.txt"), "--max-chunks", "64", "-o", p, "-q"],
           check=True, stdout=subprocess.DEVNULL)
        prof[model] = p
    # Weight packs are stored once per content (several builds share one).
    packs = os.path.join(args.out, "packs")
    os.makedirs(packs, exist_ok=True)
    for name, (model, extra, needs_profile) in CONFIGS.items():
        if not wanted(args, name):
            continue
        d = os.path.join(args.out, name)
        cmd = [args.sparsec, "compile", os.path.join(mdl, model), "--target=cuda",
               "--compile-to=emit", "-o", d, "-q"] + extra
        if needs_profile:
            cmd += ["--profile", prof[model]]
        sh(cmd, check=True, stderr=subprocess.DEVNULL)
        w = os.path.join(d, "model.weights")
        digest = hashlib.sha256(open(w, "rb").read()).hexdigest()[:16]
        if not os.path.exists(os.path.join(packs, digest)):
            shutil.move(w, os.path.join(packs, digest))
        else:
            os.remove(w)
        with open(os.path.join(d, "weights.ref"), "w") as f:
            f.write(digest)
    for name, (model, extra, share) in HYBRID.items():
        if not wanted(args, name):
            continue
        # The budget: what must live on the GPU (the compiler's minimum)
        # plus the given share of the FFN weights.
        base = [args.sparsec, "compile", os.path.join(mdl, model), "--target=hybrid",
                "--profile", prof_for(model), "-o", os.path.join(args.out, name)] + extra
        r = subprocess.run(base + ["--gpu-budget=1", "--compile-to=emit"],
                           capture_output=True, text=True)
        minimum = int(r.stderr.split("give at least gpu-budget=")[1].split()[0])
        budget = minimum + int(share * FFN_BYTES)
        r = sh(base + [f"--gpu-budget={budget}", "--compile-to=emit", "-q"],
               capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr)
        remark = [l for l in r.stderr.splitlines() if "placement:" in l]
        with open(os.path.join(args.out, name, "placement.txt"), "w") as f:
            f.write(remark[0].split("remark: ")[1] if remark else "")
        w = os.path.join(args.out, name, "model.weights")
        digest = hashlib.sha256(open(w, "rb").read()).hexdigest()[:16]
        if not os.path.exists(os.path.join(packs, digest)):
            shutil.move(w, os.path.join(packs, digest))
        else:
            os.remove(w)
        with open(os.path.join(args.out, name, "weights.ref"), "w") as f:
            f.write(digest)
    refs = os.path.join(args.out, "refs")
    os.makedirs(refs, exist_ok=True)
    for name, (case, extra) in GENERATED.items():
        if not wanted(args, name):
            continue
        onnx_path = os.path.join(tmp, case + ".onnx")
        if not os.path.exists(onnx_path):
            sh([sys.executable, os.path.join(ROOT, "test", "Frontend", "ONNX",
                                             "gen_onnx_models.py"), case, onnx_path],
               check=True)
        profile = []
        if any(a.startswith("--sparsity") for a in extra):
            p = onnx_path + ".sprof"
            if not os.path.exists(p):
                sh([args.sparsec, "profile", onnx_path, "--calib",
                    os.path.join(opt, "calib.txt"), "--max-chunks", "16", "-o", p, "-q"],
                   check=True, stdout=subprocess.DEVNULL)
            profile = ["--profile", p]
        d = os.path.join(args.out, name)
        target = [] if any(a.startswith("--target") for a in extra) else ["--target=cuda"]
        sh([args.sparsec, "compile", onnx_path, "--compile-to=emit",
            "-o", d, "-q"] + target + extra + profile, check=True, stderr=subprocess.DEVNULL)
        for prompt, rows in ROPE_PROMPTS.items():
            ids = os.path.join(refs, f"rope_{prompt}.npy")
            np.save(ids, np.array(rows, np.int64))
            r = sh([sys.executable, os.path.join(ROOT, "test", "e2e", "Inputs",
                                                 "ort_greedy.py"), onnx_path, ids,
                    str(ROPE_TOKENS)], check=True, capture_output=True, text=True)
            with open(os.path.join(refs, f"{name}_{prompt}.txt"), "w") as f:
                f.write(r.stdout)
        # The rotary layers' logits (and a cache's presents, rotated keys
        # included) against ONNX Runtime's on random ids, for the builds
        # compiled as exported.
        if case.startswith(("rope_decoder", "falcon")) and not extra:
            dims = {"batch": 2, "seq": 7, "past_seq": 3, "total_seq": 10}
            inputs = gen_inputs(onnx_path, dims, 0, 16)
            sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
            outs = sess.run(None, inputs)
            save_case(args.out, "ort_" + name, inputs,
                      {m.name: o for m, o in zip(sess.get_outputs(), outs)})
    for name, (source, dims, flags) in CNNS.items():
        if not wanted(args, name):
            continue
        kind, what = source.split(":")
        onnx_path = os.path.join(tmp, name + ".onnx")
        if kind == "gen":
            sh([sys.executable, os.path.join(ROOT, "test", "Frontend", "ONNX",
                                             "gen_onnx_models.py"), what, onnx_path],
               check=True)
        else:
            sys.path.insert(0, os.path.join(ROOT, "bench"))
            import bench_cnn
            onnx.save(getattr(bench_cnn, what)(), onnx_path)
        d = os.path.join(args.out, name)
        sh([args.sparsec, "compile", onnx_path, "--target=cuda", "--compile-to=emit",
            "-o", d, "-q"] + flags, check=True)
        w = os.path.join(d, "model.weights")
        digest = hashlib.sha256(open(w, "rb").read()).hexdigest()[:16]
        shutil.move(w, os.path.join(packs, digest))
        with open(os.path.join(d, "weights.ref"), "w") as f:
            f.write(digest)
        inputs = gen_inputs(onnx_path, dims, 0, 256)
        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        outs = sess.run(None, inputs)
        save_case(args.out, name, inputs,
                  {m.name: o for m, o in zip(sess.get_outputs(), outs)})
    shutil.rmtree(tmp)
    if args.compact:
        compact(args)

    # References: shipped ones, and ONNX Runtime at other shapes (run here,
    # so the GPU machine needs neither the ONNX files nor ONNX Runtime).
    for f in ("ref_greedy_64.bin", "ref_input_ids.npy", "heldout.txt"):
        shutil.copy(os.path.join(opt, f), refs)
    ids = np.load(os.path.join(opt, "ref_input_ids.npy"))
    mask = np.load(os.path.join(opt, "ref_attention_mask.npy"))
    save_case(args.out, "ref_prompt", {"input_ids": ids, "attention_mask": mask},
              {"logits": np.load(os.path.join(opt, "ref_logits.npy"))})
    kv_model = os.path.join(mdl, CONFIGS["kv"][0])
    names = {v.name for v in onnx.load(kv_model, load_external_data=False).graph.input}
    z = np.load(os.path.join(opt, "ref_kv_step.npz"))
    save_case(args.out, "ref_kv_step", {k: z[k] for k in z.files if k in names},
              {k: z[k] for k in z.files if k not in names})
    # The same step with the past given in float16 (a CUDA model's past
    # inputs take it: IODesc::attentionPast; widened before the attention).
    save_case(args.out, "ref_kv_step_f16past",
              {k: z[k].astype(np.float16) if k.startswith("past_key_values.") else z[k]
               for k in z.files if k in names},
              {k: z[k] for k in z.files if k not in names})
    for mlp, output in (("alexa_v0.1", "13"), ("hey_rhasspy_v0.1", "39")):
        base = os.path.join(mdl, "mlp", mlp)
        save_case(args.out, mlp, {"onnx::Flatten_0": np.load(base + ".in.0.npy")},
                  {output: np.load(base + ".out.0.npy")})
    for case, model, dims in (
            ("ort_nc17", CONFIGS["nc17"][0], {"batch": 2, "seq": 9, "total_seq": 9}),
            ("ort_nc14", CONFIGS["nc14"][0], {"batch": 2, "seq": 9, "total_seq": 9}),
            ("ort_kv", CONFIGS["kv"][0],
             {"batch": 2, "seq": 1, "past_seq": 6, "total_seq": 7}),
            ("ort_kv_prompt", CONFIGS["kv"][0],
             {"batch": 2, "seq": 12, "past_seq": 0, "total_seq": 12})):
        path = os.path.join(mdl, model)
        inputs = gen_inputs(path, dims, 0, 256)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outs = sess.run(None, inputs)
        save_case(args.out, case, inputs,
                  {m.name: o for m, o in zip(sess.get_outputs(), outs)})
    # The x86 build's top-1 predictions on held-out text, for the graph check.
    x86 = os.path.join(args.out, "x86_nc17")
    sh([args.sparsec, "compile", os.path.join(mdl, CONFIGS["nc17"][0]), "-o", x86, "-q"],
       check=True)
    sh([os.path.join(x86, "model"), "eval", "--text", os.path.join(opt, "heldout.txt"),
        "--seq-len", "128", "--max-chunks", str(EVAL_CHUNKS), "--save-top1",
        os.path.join(refs, "x86_top1.bin")], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(x86)


def ids_of(stdout, byte_rows):
    """generate's continuation as rows of ids: the raw bytes of one row of a
    byte-level model (`byte_rows`), else lines of ids."""
    if byte_rows:
        return [[str(b) for b in stdout]]
    return [l.split() for l in stdout.decode().splitlines() if l.strip()]


def build_model(name):
    """The ONNX file build `name` was compiled from (relative to --models)."""
    return CONFIGS[name][0] if name in CONFIGS else HYBRID[name][0]


def compact(args):
    """Replaces weight packs by what rebuilds them: the source models'
    initializers, stored once per distinct array (sources/arrays.npz plus a
    name -> array map per model), and each build's compiler-made segments
    (predictors, model.inline.bin.gz). A pack is dropped only when the rebuild
    here is byte-identical to it; `run` rebuilds it the same way."""
    import hashlib
    import json
    import types
    import onnx
    from onnx import numpy_helper
    sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
    import opt_synth
    src = os.path.join(args.out, "sources")
    os.makedirs(src, exist_ok=True)
    arrays, maps = {}, {}
    keep, dropped = set(), 0
    for name in present(types.SimpleNamespace(dir=args.out)):
        d = os.path.join(args.out, name)
        ref = os.path.join(d, "weights.ref")
        if not os.path.exists(ref):
            continue
        digest = open(ref).read().strip()
        if name in GENERATED or name in CNNS:  # small packs of generated models stay
            keep.add(digest)
            continue
        pack = os.path.join(args.out, "packs", digest)
        model = build_model(name)
        if model not in maps:
            m = onnx.load(os.path.join(args.models, model))
            maps[model] = {}
            for init in m.graph.initializer:
                a = numpy_helper.to_array(init)
                h = hashlib.sha256(a.dtype.str.encode() + str(a.shape).encode() +
                                   a.tobytes()).hexdigest()[:16]
                arrays[h] = a
                maps[model][init.name] = h
        names = maps[model]
        manifest = os.path.join(d, "model.manifest.json")
        opt_synth.cmd_extract_inline(types.SimpleNamespace(manifest=manifest, weights=pack))
        rebuilt = os.path.join(d, "model.weights.rebuilt")
        try:
            opt_synth.write_pack(manifest, rebuilt, lambda n: arrays[names[n]])
            same = open(rebuilt, "rb").read() == open(pack, "rb").read()
        except (KeyError, SystemExit) as e:
            print(f"{name}: pack kept ({e})", file=sys.stderr)
            same = False
        if os.path.exists(rebuilt):
            os.remove(rebuilt)
        if same:
            with open(os.path.join(d, "weights.src"), "w") as f:
                f.write(os.path.basename(model) + ".json")
            os.remove(ref)
            dropped += 1
        else:
            keep.add(digest)
    used = set()
    for model, names in maps.items():
        used |= set(names.values())
        with open(os.path.join(src, os.path.basename(model) + ".json"), "w") as f:
            json.dump(names, f)
    np.savez(os.path.join(src, "arrays.npz"), **{h: arrays[h] for h in used})
    for digest in os.listdir(os.path.join(args.out, "packs")):
        if digest not in keep:
            os.remove(os.path.join(args.out, "packs", digest))
    print(f"compact: {dropped} packs rebuilt from {len(used)} source arrays, "
          f"{len(keep)} kept", file=sys.stderr)


def restore_packs(args):
    """Gives every build its model.weights: a stored pack or one rebuilt by
    the compact form of `prepare`."""
    import json
    sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
    arrays = None
    for name in present(args):
        d = os.path.join(args.dir, name)
        w = os.path.join(d, "model.weights")
        if os.path.exists(w):
            continue
        if os.path.exists(os.path.join(d, "weights.src")):
            import opt_synth
            if arrays is None:
                # Read whole: write_pack builds segments in threads, and an
                # NpzFile's members share one zip file handle (reads from
                # several threads fail their CRC checks).
                with np.load(os.path.join(args.dir, "sources", "arrays.npz")) as z:
                    arrays = {k: z[k] for k in z.files}
            names = json.load(open(os.path.join(
                args.dir, "sources", open(os.path.join(d, "weights.src")).read().strip())))
            opt_synth.write_pack(os.path.join(d, "model.manifest.json"), w,
                                 lambda n: arrays[names[n]])
        else:
            digest = open(os.path.join(d, "weights.ref")).read().strip()
            shutil.copy(os.path.join(args.dir, "packs", digest), w)


def build_runtime(lib, nvcc):
    """Builds libsparsec_runtime.a (g++) and libsparsec_runtime_cuda.a (nvcc)."""
    os.makedirs(lib, exist_ok=True)
    inc = os.path.join(ROOT, "runtime", "include")
    # sm_90a machine code (PIT's warpgroup MMAs), compute_90 PTX, as CMake.
    arch = ["-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_90,code=compute_90"]
    jobs = []
    host_objs, cuda_objs = [], []
    for src in sorted(glob.glob(os.path.join(ROOT, "runtime/src/core/*.cpp")) +
                      glob.glob(os.path.join(ROOT, "runtime/src/cpu/*.cpp"))):
        obj = os.path.join(lib, os.path.basename(src) + ".o")
        host_objs.append(obj)
        jobs.append(["g++", "-std=c++17", "-O3", "-fno-math-errno", "-I", inc, "-c", src,
                     "-o", obj])
    for src in sorted(glob.glob(os.path.join(ROOT, "runtime/src/cuda/*.cu"))):
        obj = os.path.join(lib, os.path.basename(src) + ".o")
        cuda_objs.append(obj)
        jobs.append([nvcc, "-std=c++17", "-O3"] + arch + ["-I", inc, "-c", src, "-o", obj])
    procs = [subprocess.Popen(j) for j in jobs]
    if any(p.wait() != 0 for p in procs):
        sys.exit("FAIL building the runtime")
    sh(["ar", "rcs", os.path.join(lib, "libsparsec_runtime.a")] + host_objs, check=True)
    sh(["ar", "rcs", os.path.join(lib, "libsparsec_runtime_cuda.a")] + cuda_objs, check=True)


def build(args):
    """Builds the runtime archives and every model binary under args.dir."""
    lib = os.path.join(args.dir, "lib")
    if args.runtime_lib:
        os.makedirs(lib, exist_ok=True)
        for a in ("libsparsec_runtime.a", "libsparsec_runtime_cuda.a"):
            src = os.path.join(args.runtime_lib, a)
            if not os.path.exists(src):
                sys.exit(f"FAIL --runtime-lib: no {src}")
            shutil.copyfile(src, os.path.join(lib, a))
    else:
        build_runtime(lib, args.nvcc)
    inc = os.path.join(ROOT, "runtime", "include")
    arch = ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=compute_90"]
    procs = []
    for name in present(args):
        d = os.path.join(args.dir, name)
        procs.append((name, subprocess.Popen(
            [args.nvcc, "-std=c++17", "-O3"] + arch +
            ["-I", inc, os.path.join(d, "model.cu"),
             os.path.join(lib, "libsparsec_runtime_cuda.a"),
             os.path.join(lib, "libsparsec_runtime.a"), "-lcublas", "-lcublasLt", "-lpthread", "-o",
             os.path.join(d, "model")])))
    for name, p in procs:
        if p.wait() != 0:
            sys.exit(f"FAIL building {name}")


def present(args):
    """The builds `prepare` wrote to args.dir."""
    return [n for n in list(CONFIGS) + list(HYBRID) + list(GENERATED) + list(CNNS)
            if os.path.exists(os.path.join(args.dir, n, "model.cu"))]


class Results:
    def __init__(self):
        self.passed = self.failed = 0

    def record(self, ok, line):
        print(("PASS " if ok else "FAIL ") + line, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


# PIT builds: opt-byte-s's prompts give PIT grids of a few blocks, which the
# runtime leaves to cuBLAS by default (docs/GPU.md, "PIT on short
# inputs"); their checks force the compiler's plan so that PIT's kernels
# run (nc17_pit's and nc17_pit256's prompt logits are checked by default
# too).
PIT_BUILDS = ("nc17_pit", "nc17_pit256", "nc17_pit_bf16", "kv_pit", "kv_pit_bf16")
PIT_FORCED = {"SPARSEC_CUDA_PIT": "always"}


def case_logits(args, name, case):
    """Where check_case keeps build `name`'s logits for `case`."""
    return os.path.join(args.dir, name, "by_case", case + ".npy")


def check_case(args, res, name, case, rtol, atol, label="", env=None):
    """Runs build `name` on the inputs of `case` and compares its outputs
    (the binary with `env` added to the environment)."""
    import json
    if not os.path.exists(os.path.join(args.dir, name, "model")):
        return
    d = os.path.join(args.dir, "cases", case)
    manifest = json.load(open(os.path.join(d, "case.json")))
    cmd = [sys.executable, os.path.join(HERE, "e2e_check.py"), "--sparsec", "-",
           "--model", "-", "--out", os.path.join(args.dir, name), "--no-compile",
           "--rtol", str(rtol), "--atol", str(atol)]
    for n, f in manifest["inputs"].items():
        cmd += ["--input", f"{n}={os.path.join(d, f)}"]
    for n, f in manifest["refs"].items():
        cmd += ["--reference", f"{n}={os.path.join(d, f)}"]
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, **env) if env else None)
    # The case's logits kept apart for the sparse == dense comparisons (a
    # later case overwrites results/; the last run of a case stays).
    logits = os.path.join(args.dir, name, "results", "logits.npy")
    if r.returncode == 0 and os.path.exists(logits):
        os.makedirs(os.path.join(args.dir, name, "by_case"), exist_ok=True)
        shutil.copyfile(logits, case_logits(args, name, case))
    lines = (r.stdout + r.stderr).strip().splitlines()
    res.record(r.returncode == 0,
               f"{name} {case}{label} (rtol {rtol}, atol {atol}): " +
               " | ".join(lines[-9:]))


def run_binary(args, name, *argv, env=None):
    return subprocess.run([os.path.join(args.dir, name, "model")] + list(argv),
                          capture_output=True,
                          env=dict(os.environ, **env) if env else None)


def run(args):
    if not args.no_build:
        build(args)
    res = Results()
    refs = os.path.join(args.dir, "refs")
    restore_packs(args)

    check_case(args, res, "alexa", "alexa_v0.1", 1e-4, 1e-5)
    check_case(args, res, "alexa_f16", "alexa_v0.1", 1e-4, 2e-3, " (fp16 weights)")
    check_case(args, res, "rhasspy", "hey_rhasspy_v0.1", 1e-4, 1e-5)
    for name in ("nc17", "nc14", "nc17_exact"):
        check_case(args, res, name, "ort_" + ("nc14" if name == "nc14" else "nc17"),
                   1e-4, 1e-4)
        check_case(args, res, name, "ref_prompt", 1e-4, 1e-4)
    check_case(args, res, "nc17_f16", "ref_prompt", 2e-2, 5e-2, " (fp16 weights)")
    # The default first: the PIT-forced run below leaves its logits for
    # the sparse == dense comparison.
    for name in ("nc17_pit", "nc17_pit256"):
        check_case(args, res, name, "ref_prompt", 2e-2, 5e-2,
                   " (fp16 weights, PIT's plan left to the runtime)")
    check_case(args, res, "nc17_pit", "ref_prompt", 2e-2, 5e-2,
               " (fp16 weights, PIT 32 x 1 tiles)", PIT_FORCED)
    check_case(args, res, "nc17_pit256", "ref_prompt", 2e-2, 5e-2,
               " (fp16 weights, PIT 32 x 1 tiles, 256 columns)", PIT_FORCED)
    for name in ("kv", "kv_exact", "kv_fold"):
        check_case(args, res, name, "ort_kv", 1e-4, 1e-4)
        check_case(args, res, name, "ref_kv_step", 1e-4, 1e-4)
    # A prompt of 2 x 12 tokens with an empty past: more rows than a
    # decode batch, which predicted FFNs compute exactly on the GPU (no
    # predictor), so the predicted build is held to ONNX Runtime's logits
    # and presents as the dense one.
    for name in ("kv", "kv_exact", "kv_pred"):
        check_case(args, res, name, "ort_kv_prompt", 1e-4, 1e-4,
                   " (24 prompt rows" + (", predicted FFNs exact)" if name == "kv_pred"
                                         else ")"))
    check_case(args, res, "kv_f16", "ref_kv_step", 2e-2, 5e-2, " (fp16 weights)")
    for name in ("kv", "kv_f16"):
        check_case(args, res, name, "ref_kv_step_f16past", 2e-2, 5e-2,
                   " (the past given in float16)")
    check_case(args, res, "kv_f16_fold", "ref_kv_step", 2e-2, 5e-2,
               " (fp16 weights, norms folded)")
    check_case(args, res, "nc17_bf16", "ref_prompt", *BF16_TOL, " (bf16 weights)")
    check_case(args, res, "nc17_pit_bf16", "ref_prompt", *BF16_TOL,
               " (bf16 weights, PIT 32 x 1 tiles)", PIT_FORCED)
    for name in ("kv_bf16", "kv_exact_bf16"):
        check_case(args, res, name, "ref_kv_step", *BF16_TOL, " (bf16 weights)")
    check_case(args, res, "nc17_kv", "ref_kv_step", 1e-4, 1e-4, " (derived KV cache)")
    check_case(args, res, "nc17_kv", "ort_kv", 1e-4, 1e-4, " (derived KV cache)")

    # Sparse == dense on the GPU (exact mode), same inputs: the 71-token
    # prompt (batched path) and one KV decode step (the neuron-granular
    # kernels: summation order differs, so not bit-equal). Each pair is
    # compared on the logits of one named case (the PIT builds' last
    # ref_prompt run is the PIT-forced one).
    have = set(present(args))
    # PIT against the dense fp16 build: both round the activations and
    # weights to fp16 and sit about 0.02 from the fp32 reference (their
    # check above), so they are held to the fp16 builds' 5e-2 there; a
    # missed micro-tile would be off by whole activations. PIT on bf16
    # weights likewise against the dense bf16 build, within the bf16
    # builds' 1e-1.
    for dense, sparse, case, what, tol in (
            ("nc17", "nc17_exact", "ref_prompt", "71-token prompt", 1e-4),
            ("kv", "kv_exact", "ref_kv_step", "decode step", 1e-4),
            ("nc17_f16", "nc17_pit", "ref_prompt",
             "71-token prompt, PIT 32 x 1 vs dense fp16", 5e-2),
            ("nc17_f16", "nc17_pit256", "ref_prompt",
             "71-token prompt, PIT 32 x 1 at 256 columns vs dense fp16", 5e-2),
            ("kv_bf16", "kv_exact_bf16", "ref_kv_step", "decode step, bf16 weights", 1e-3),
            ("nc17_bf16", "nc17_pit_bf16", "ref_prompt",
             "71-token prompt, PIT 32 x 1 vs dense bf16", BF16_TOL[0])):
        if dense not in have or sparse not in have:
            continue
        pa, pb = case_logits(args, dense, case), case_logits(args, sparse, case)
        if not os.path.exists(pa) or not os.path.exists(pb):
            res.record(False, f"exact sparse vs dense, {what}: no {case} logits "
                       f"from {dense if not os.path.exists(pa) else sparse}")
            continue
        a, b = np.load(pa), np.load(pb)
        if a.shape == b.shape:
            err = float(np.abs(a - b).max())
            res.record(err <= tol, f"exact sparse == dense on the GPU, {what}: "
                       f"max abs diff {err:.3g} (<= {tol:g})")
        else:
            res.record(False, f"exact sparse vs dense, {what}: shapes {a.shape} and {b.shape}")

    expect = open(os.path.join(refs, "ref_greedy_64.bin"), "rb").read()
    prompt = os.path.join(refs, "ref_input_ids.npy")
    default64 = {}

    def greedy64(name, env=None):
        """`generate` of 64 bytes from the reference prompt; the default run
        (no env) once per build."""
        if env is None and name in PIT_BUILDS:
            env = PIT_FORCED
        if env:
            return run_binary(args, name, "generate", "--prompt-ids", prompt,
                              "--max-new-tokens", "64", env=env)
        if name not in default64:
            default64[name] = run_binary(args, name, "generate", "--prompt-ids",
                                         prompt, "--max-new-tokens", "64")
        return default64[name]

    for name, must_match in (("kv", True), ("kv_exact", True), ("kv_f16", False),
                             ("kv_pred", False), ("kv_pred_f16", False),
                             ("nc17_kv", True), ("kv_pit", False),
                             ("kv_fold", True), ("kv_f16_fold", False),
                             ("kv_bf16", False), ("kv_exact_bf16", False),
                             ("kv_pred_bf16", False), ("kv_pit_bf16", False)):
        if name not in have:
            continue
        r = greedy64(name)
        got = r.stdout
        same = sum(x == y for x, y in zip(got, expect))
        stats = r.stderr.decode(errors="replace").strip().splitlines()
        # The device cache's check must pass (a predicted build's check
        # step computes its FFNs exactly, as the prompt does): otherwise
        # the cache goes through host memory, the same bytes far slower.
        host_cache = b"does not ignore masked past entries" in r.stderr
        line = f"{name} greedy 64 bytes: {same}/64 equal to ref_greedy_64.bin" + \
            ("; the device cache's check FAILED" if host_cache else "") + "; " + \
            (stats[-1] if stats else "")
        res.record(r.returncode == 0 and (same == 64 or not must_match) and not host_cache,
                   line)
    def same_as_default(name, what, env):
        """A runtime switch must not change a byte of the default run."""
        base, r = greedy64(name), greedy64(name, env)
        stats = r.stderr.decode(errors="replace").strip().splitlines()
        res.record(r.returncode == 0 and base.returncode == 0 and r.stdout == base.stdout,
                   f"{name} greedy 64 bytes with {what}: "
                   f"{sum(x == y for x, y in zip(r.stdout, base.stdout))}/64 equal to "
                   f"the default; " + (stats[-1] if stats else ""))

    # The dense GEMVs launched normally (by default every kind of kernel
    # launches early), one graph a step instead of a split step, no early
    # launch at all, decode attention merged through memory instead of as a
    # cluster, the cached past read after the attention's wait.
    for name in ("kv", "kv_f16", "kv_exact", "kv_fold"):
        if name in have:
            same_as_default(name, "GEMVs launched normally",
                            {"SPARSEC_CUDA_PDL": "small,sparse"})
    switches = (("one graph a step", {"SPARSEC_CUDA_SPLIT": "0"}),
                ("normal launches only", {"SPARSEC_CUDA_PDL": "0"}),
                ("attention merged through memory", {"SPARSEC_CUDA_ATTN_CLUSTER": "0"}),
                ("the past read after the wait", {"SPARSEC_CUDA_ATTN_PREFETCH": "0"}),
                ("greedy picks on the host", {"SPARSEC_CUDA_ARGMAX": "0"}),
                ("each step waited for", {"SPARSEC_CUDA_AHEAD": "0"}))
    for name in ("kv_f16", "kv_pred_f16", "kv_exact"):
        if name in have:
            for what, env in switches:
                same_as_default(name, what, env)
    # The norm in front of each predicted FFN in the predictor's kernel (the
    # default) against the norm kernel of its own: the same bits.
    for name in ("kv_pred", "kv_pred_f16"):
        if name in have:
            same_as_default(name, "the norm kernel of its own",
                            {"SPARSEC_CUDA_NORM_FUSE": "0"})
    # Greedy picks on the device (the default): the decode steps must still
    # replay their graphs (its buffers grow after a step, never inside a
    # capture).
    if "kv_f16" in have:
        r = greedy64("kv_f16", {"SPARSEC_CUDA_PROFILE": "1"})
        err = r.stderr.decode(errors="replace")
        replayed = [l for l in err.splitlines() if "replayed steps:" in l and "us" in l]
        notes = [l for l in err.splitlines() if l.startswith("sparsec cuda graphs:")]
        res.record(r.returncode == 0 and r.stdout == greedy64("kv_f16").stdout and
                   bool(replayed) and not notes,
                   "kv_f16 greedy picks on the device: graphs replayed "
                   f"({replayed[0].split(':', 1)[-1].strip() if replayed else 'none'}); "
                   f"{len(notes)} graph notes" + (f"; {notes[0]}" if notes else ""))
    # The 16-bit device KV cache (SPARSEC_CUDA_KV_CACHE=f16): float16 where
    # the weights are fp16 (bf16 builds keep float32's range) and every past
    # input is read only by attention ops (the binary's
    # IODesc::attentionPast), float32 otherwise
    # and by default. The profile's count of float16 caches must say which,
    # the cache's check must pass both ways, and the bytes are set against
    # the float32 cache's and the reference (float16 rounds every cached
    # key and value). `want`: whether the caches are float16 when asked
    # (None: not checked, a hybrid build's CPU attention).
    def kv_caches(r):
        m = re.search(rb"KV caches: (\d+), (\d+) of them float16", r.stderr)
        return (int(m.group(1)), int(m.group(2))) if m else None
    for name, want in (("kv", False), ("kv_f16", True), ("kv_pred_f16", True),
                       ("kv_bf16", False), ("kv_hy30_f16", None)):
        if name not in have:
            continue
        half = greedy64(name, {"SPARSEC_CUDA_PROFILE": "1", "SPARSEC_CUDA_KV_CACHE": "f16"})
        full = greedy64(name, {"SPARSEC_CUDA_PROFILE": "1"})
        hc, fc = kv_caches(half), kv_caches(full)
        fell_back = any(b"does not ignore masked past entries" in r.stderr
                        for r in (half, full))
        kind_ok = (hc is not None and fc is not None and hc[0] > 0 and fc[1] == 0 and
                   (want is None or hc[1] == (hc[0] if want else 0)))
        same = lambda a, b: sum(x == y for x, y in zip(a, b))
        res.record(half.returncode == 0 and full.returncode == 0 and kind_ok and
                   not fell_back,
                   f"{name} KV cache: {hc[1] if hc else '?'} of {hc[0] if hc else '?'} "
                   f"caches float16 with SPARSEC_CUDA_KV_CACHE=f16, "
                   f"{fc[1] if fc else '?'} by default"
                   + ("; the cache's check FAILED" if fell_back else "") +
                   f"; greedy 64 bytes {same(half.stdout, expect)}/64 equal to "
                   f"ref_greedy_64.bin ({same(full.stdout, expect)}/64 with the float32 "
                   f"cache), {same(half.stdout, full.stdout)}/64 to the float32 cache's")

    def batch_of_prompt(b):
        """The reference prompt repeated b times (an ids file)."""
        path = os.path.join(args.dir, f"batch{b}_ids.npy")
        np.save(path, np.tile(np.load(prompt), (b, 1)))
        return path

    batch1 = {}

    def batch1_row(name):
        """(ok, the 16 greedy bytes of one prompt as a batch prints a row)."""
        if name not in batch1:
            one = run_binary(args, name, "generate", "--prompt-ids", prompt,
                             "--max-new-tokens", "16")
            # Batches print each row's ids on a line; one prompt prints bytes.
            batch1[name] = (one.returncode == 0, " ".join(str(c) for c in one.stdout))
        return batch1[name]

    def rows_equal(r, want):
        """The rows a batch decoded, and how many equal `want`."""
        rows = r.stdout.decode(errors="replace").splitlines() if r.returncode == 0 else []
        return rows, sum(row.strip() == want for row in rows)

    # Decode batches above 8 tokens take the batched path (cuBLAS, and in
    # predicted mode the FFNs computed exactly, without the predictor):
    # their steps must replay one graph too (every step makes the same
    # allocations), and every row of a batch of one prompt repeated decodes
    # the dense build's batch-1 bytes (the predicted build's too: its
    # prompt and every step of 12 rows are exact). The predicted build
    # once more with the predictor run there (SPARSEC_CUDA_BATCHED_PREDICT,
    # the behaviour before), which must replay as well; its rows may
    # differ.
    batch_ids = batch_of_prompt(12)
    for name, env in (("kv", {}), ("kv_pred", {}),
                      ("kv_pred", {"SPARSEC_CUDA_BATCHED_PREDICT": "1"})):
        if name not in have:
            continue
        r = run_binary(args, name, "generate", "--prompt-ids", batch_ids,
                       "--max-new-tokens", "16",
                       env=dict(env, SPARSEC_CUDA_PROFILE="1"))
        err = r.stderr.decode(errors="replace")
        replayed = [l for l in err.splitlines() if "replayed steps" in l]
        notes = [l for l in err.splitlines() if l.startswith("sparsec cuda graphs:")]
        rows, same = rows_equal(r, batch1_row("kv" if "kv" in have else name)[1])
        res.record(r.returncode == 0 and bool(replayed) and not notes and
                   (same == 12 or bool(env)) and len(rows) == 12,
                   f"{name} batch 12 x 16 bytes{' (predictor in batches)' if env else ''}: "
                   "graphs replayed "
                   f"({replayed[0].split(':', 1)[-1].strip() if replayed else 'none'}); "
                   f"{len(notes)} graph notes; {same}/12 rows equal to dense batch 1"
                   + (f"; {notes[0]}" if notes else ""))
    # Predicted decode batches of 2 and 4 (the neuron-granular kernels; 2
    # tokens fuse the predictor's selection with the up projection, 4 run
    # them apart): each token keeps its own neurons, so every row of one
    # prompt repeated decodes the batch-1 bytes.
    for name in ("kv_pred", "kv_pred_f16"):
        if name not in have:
            continue
        one_ok, want = batch1_row(name)
        for b in (2, 4):
            r = run_binary(args, name, "generate", "--prompt-ids", batch_of_prompt(b),
                           "--max-new-tokens", "16")
            rows, same = rows_equal(r, want)
            err = r.stderr.decode(errors="replace").strip().splitlines()
            res.record(one_ok and r.returncode == 0 and len(rows) == b and same == b,
                       f"{name} batch {b} x 16 bytes: {same}/{b} rows equal to batch 1; "
                       + (err[-1] if err else ""))
    # No-cache export: generate reruns the whole sequence per byte.
    if "nc17" in have:
        r = run_binary(args, "nc17", "generate", "--prompt-ids", prompt,
                       "--max-new-tokens", "64")
        res.record(r.returncode == 0 and r.stdout == expect,
                   f"nc17 greedy 64 bytes (no cache): "
                   f"{'equal' if r.stdout == expect else 'differ'}")

    # CUDA graphs: fixed-shape chunks replay one graph.
    for name in ("nc17", "nc17_exact", "nc17_f16"):
        if name not in have:
            continue
        r = run_binary(args, name, "eval", "--text", os.path.join(refs, "heldout.txt"),
                       "--seq-len", "128", "--max-chunks", str(EVAL_CHUNKS),
                       "--compare-top1", os.path.join(refs, "x86_top1.bin"))
        out = (r.stdout + r.stderr).decode(errors="replace").strip().replace("\n", " | ")
        ok = r.returncode == 0
        agree = None
        for line in (r.stdout + r.stderr).decode(errors="replace").splitlines():
            if line.startswith("top-1 agreement:"):
                agree = float(line.split()[2].rstrip("%"))
        need = 99.0 if name.endswith("f16") else 99.9
        res.record(ok and agree is not None and agree >= need,
                   f"{name} eval with CUDA graphs vs x86 top-1 (>= {need}%): {out}")
    # Hybrid GPU + CPU builds (hot/cold placement) equal dense: at budgets
    # leaving none, 30 % and all of the FFN weights for the GPU, and the
    # layer-offload baseline; fp16 weights on both devices within the fp16
    # builds' tolerances (and no ONNX Runtime case: it is float32).
    fp32 = (["ref_kv_step", "ort_kv"], 1e-4, 1e-4, " (hybrid)")
    fp16 = (["ref_kv_step"], 2e-2, 5e-2, " (hybrid, fp16 weights)")
    for name, (cases, rtol, atol, label) in (
            ("kv_hy0", fp32), ("kv_hy30", fp32), ("kv_hy100", fp32),
            ("kv_offload30", fp32), ("kv_hy30_f16", fp16), ("kv_offload30_f16", fp16)):
        if name not in have:
            continue
        place = open(os.path.join(args.dir, name, "placement.txt")).read().strip()
        print(f"     {name}: {place}")
        for case in cases:
            check_case(args, res, name, case, rtol, atol, label)
        r = run_binary(args, name, "generate", "--prompt-ids", prompt,
                       "--max-new-tokens", "64")
        stats = r.stderr.decode(errors="replace").strip().splitlines()
        res.record(r.returncode == 0 and r.stdout == expect,
                   f"{name} greedy 64 bytes{label}: "
                   f"{sum(x == y for x, y in zip(r.stdout, expect))}/64 equal; "
                   + (stats[-1] if stats else ""))
    # Hybrid steps replayed as graph segments against eager steps.
    for name in ("kv_hy30", "kv_offload30"):
        if name not in have:
            continue
        runs = [run_binary(args, name, "generate", "--prompt-ids", prompt,
                           "--max-new-tokens", "64", env={"SPARSEC_CUDA_GRAPHS": g})
                for g in ("1", "0")]
        res.record(all(r.returncode == 0 for r in runs) and runs[0].stdout == runs[1].stdout,
                   f"{name} greedy 64 bytes, graph segments vs eager: "
                   f"{sum(x == y for x, y in zip(runs[0].stdout, runs[1].stdout))}/64 equal")
    check_case(args, res, "nc17_hy30", "ref_prompt", 1e-4, 1e-4, " (hybrid)")
    check_case(args, res, "nc17_hy30", "ort_nc17", 1e-4, 1e-4, " (hybrid)")
    if "kv_hy30_pred" in have:
        r = run_binary(args, "kv_hy30_pred", "generate", "--prompt-ids", prompt,
                       "--max-new-tokens", "64")
        same = sum(x == y for x, y in zip(r.stdout, expect))
        stats = r.stderr.decode(errors="replace").strip().splitlines()
        res.record(r.returncode == 0, f"kv_hy30_pred greedy 64 bytes (hybrid, predicted): "
                   f"{same}/64 equal to ref_greedy_64.bin; " + (stats[-1] if stats else ""))
    # Generated LLaMA-style layers: greedy ids as ONNX Runtime's, with steps
    # launched ahead (the default) and each step waited for.
    for name in GENERATED:
        if name not in have:
            continue
        for prompt in ROPE_PROMPTS:
            want = open(os.path.join(refs, f"{name}_{prompt}.txt")).read().split("\n")
            want = [l.split() for l in want if l.strip()]
            envs = [{}, {"SPARSEC_CUDA_AHEAD": "0"}]
            if name.startswith("gated"):  # the three ops of gatedFfn apart
                envs.append({"SPARSEC_CUDA_GATED_FUSE": "0"})
            for env in envs:
                r = run_binary(args, name, "generate", "--prompt-ids",
                               os.path.join(refs, f"rope_{prompt}.npy"),
                               "--max-new-tokens", str(ROPE_TOKENS), env=env)
                # gated_lm*, relu2_lm and falcon_decoder* have a byte
                # vocabulary: one row streams raw bytes, a batch prints lines
                # of ids.
                got = ids_of(r.stdout, len(want) == 1 and
                             name.startswith(("gated", "relu2", "falcon")))
                stats = r.stderr.decode(errors="replace").strip().splitlines()
                res.record(r.returncode == 0 and got == want,
                           f"{name} greedy {ROPE_TOKENS} ids, {len(want)} prompt(s)"
                           f"{ENV_LABELS[tuple(env)] if env else ''}: "
                           f"{'equal to' if got == want else 'differ from'} ONNX Runtime's; "
                           + (stats[-1] if stats else ""))
    for name in GENERATED:  # the builds prepare() made ONNX Runtime cases for
        if os.path.isdir(os.path.join(args.dir, "cases", "ort_" + name)):
            check_case(args, res, name, "ort_" + name, 1e-4, 1e-5, " (rotary)")
    # Convolutional networks against ONNX Runtime: fp32 and fp16 weights.
    for name, (_, _, flags) in CNNS.items():
        if "--weights=f16" in flags:
            check_case(args, res, name, name, *CNN_F16_TOL, " (CNN, fp16 weights)")
        elif "--weights=bf16" in flags:
            check_case(args, res, name, name, *CNN_BF16_TOL, " (CNN, bf16 weights)")
        else:
            check_case(args, res, name, name, 1e-4, 1e-4, " (CNN)")
    print(f"{res.passed} passed, {res.failed} failed")
    return 0 if res.failed == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--sparsec", required=True)
    p.add_argument("--models", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--only", help="base, hybrid, generated or build names, comma-separated "
                   "(a GPU machine may take less than everything at once)")
    p.add_argument("--compact", action="store_true",
                   help="store the source models' arrays once instead of one weight pack "
                   "per build; `run` rebuilds the packs (byte-identical)")
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    r.add_argument("--no-build", action="store_true")
    r.add_argument("--runtime-lib", help="use this directory's runtime archives instead of "
                   "building them")
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
