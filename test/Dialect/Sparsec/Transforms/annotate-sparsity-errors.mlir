// RUN: %pyexe %S/Inputs/make_sprof.py %t.bad.sprof --garbage
// RUN: not sparsec-opt %s --sparsec-annotate-sparsity=profile=%t.bad.sprof 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not sparsec-opt %s --sparsec-annotate-sparsity=profile=%t.absent.sprof 2>&1 | FileCheck %s --check-prefix=ABSENT
// RUN: not sparsec-opt %s --sparsec-annotate-sparsity 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not sparsec-opt %s --sparsec-annotate-sparsity=profile=%S 2>&1 | FileCheck %s --check-prefix=DIR
// BAD: error: '{{.*}}bad.sprof' is not a valid sparsec profile: truncated metadata
// ABSENT: error: cannot open profile '{{.*}}absent.sprof'
// NONE: error: sparsec-annotate-sparsity needs profile=<file.sprof>
// DIR: error: cannot read profile '{{.*}}': Is a directory
module {
}
