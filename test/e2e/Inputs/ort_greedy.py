#!/usr/bin/env python3
"""Greedy continuation of a decoder with ONNX Runtime, the reference for
`model generate`.

Usage: ort_greedy.py MODEL.onnx PROMPT_IDS.npy N

PROMPT_IDS is int64 [n] or [batch, n]. A model with past_key_values.*
inputs runs the prompt, then one token a step over its own cache; one
without reruns the whole sequence each step. attention_mask (all ones) and
position_ids (each token's index) are fed when the model takes them.
Prints each row's N new ids on a line, separated by spaces.
"""
import sys

import numpy as np
import onnxruntime as ort


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # no warnings about unused initializers
    sess = ort.InferenceSession(sys.argv[1], options,
                                providers=["CPUExecutionProvider"])
    prompt = np.load(sys.argv[2]).astype(np.int64)
    if prompt.ndim == 1:
        prompt = prompt[None]
    steps = int(sys.argv[3])
    inputs = {i.name: i for i in sess.get_inputs()}
    outputs = [o.name for o in sess.get_outputs()]
    past_names = [n for n in inputs if n.startswith("past_key_values.")]
    batch = prompt.shape[0]
    past = {}
    for n in past_names:
        shape = inputs[n].shape
        past[n] = np.zeros((batch, shape[1], 0, shape[3]), np.float32)
    seq = prompt
    new = prompt
    for _ in range(steps):
        cached = next(iter(past.values())).shape[2] if past else 0
        ids = new if past else seq
        first = cached if past else 0
        feed = {"input_ids": ids}
        if "attention_mask" in inputs:
            feed["attention_mask"] = np.ones((batch, first + ids.shape[1]), np.int64)
        if "position_ids" in inputs:
            feed["position_ids"] = np.tile(
                np.arange(first, first + ids.shape[1], dtype=np.int64), (batch, 1))
        feed.update(past)
        result = dict(zip(outputs, sess.run(None, feed)))
        for n in past_names:
            past[n] = result["present." + n[len("past_key_values."):]]
        nxt = result["logits"][:, -1].argmax(-1).astype(np.int64)[:, None]
        seq = np.concatenate([seq, nxt], axis=1)
        new = nxt
    for row in seq[:, prompt.shape[1]:]:
        print(" ".join(str(int(t)) for t in row))


if __name__ == "__main__":
    main()
