#!/usr/bin/env python3
"""Compares two `<model> eval` outputs (dense and sparse) against limits.

  check_eval.py DENSE.txt SPARSE.txt [--min-agreement 99] [--max-loss-increase 1]

DENSE.txt is the output of `eval --save-top1 F`, SPARSE.txt that of
`eval --compare-top1 F` over the same text. Prints the numbers and PASS, or
FAIL with the reason (exit status 1).
"""
import argparse
import re
import sys


def parse(path):
    text = open(path).read()
    loss = re.search(r"loss: ([0-9.]+) nats/byte", text)
    agree = re.search(r"top-1 agreement: ([0-9.]+)%", text)
    if not loss:
        sys.exit(f"FAIL: no loss line in {path}")
    return float(loss.group(1)), float(agree.group(1)) if agree else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dense")
    ap.add_argument("sparse")
    ap.add_argument("--min-agreement", type=float, default=99.0,
                    help="percent of positions with the dense top-1")
    ap.add_argument("--max-loss-increase", type=float, default=1.0,
                    help="percent of the dense loss")
    a = ap.parse_args()
    dense_loss, _ = parse(a.dense)
    sparse_loss, agreement = parse(a.sparse)
    if agreement is None:
        sys.exit(f"FAIL: no top-1 agreement line in {a.sparse}")
    increase = 100.0 * (sparse_loss - dense_loss) / dense_loss
    print(f"dense loss {dense_loss:.5f}, sparse loss {sparse_loss:.5f} "
          f"({increase:+.2f}%), top-1 agreement {agreement:.3f}%")
    if agreement < a.min_agreement:
        print(f"FAIL: agreement {agreement:.3f}% < {a.min_agreement}%")
        return 1
    if increase > a.max_loss_increase:
        print(f"FAIL: loss +{increase:.2f}% > {a.max_loss_increase}%")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
