// Sites are named by their ONNX node (a NameLoc without a file position),
// so these diagnostics are checked on stderr.
// RUN: %pyexe %S/Inputs/make_sprof.py %t.sprof 0x00000000000000ab "/l0/Relu:100:60,40,10,10,10,5,5,5,5,0"
// RUN: not sparsec-opt %s --split-input-file --sparsec-annotate-sparsity=profile=%t.sprof 2>&1 | FileCheck %s
// CHECK: error: {{.*}}activation site '/l7/Relu' is not in profile '{{.*}}.sprof'
// CHECK: error: {{.*}}profile site '/l0/Relu' has 10 neurons, the model 12

module {
func.func @missing_site(%x: tensor<?x8xf32>, %w1: tensor<8x10xf32>, %w2: tensor<10x8xf32>) -> tensor<?x8xf32> {
  %h = sparsec.linear %x, %w1 : tensor<?x8xf32>, tensor<8x10xf32> -> tensor<?x10xf32>
  %r = sparsec.relu %h : tensor<?x10xf32> loc("/l7/Relu")
  %y = sparsec.linear %r, %w2 : tensor<?x10xf32>, tensor<10x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
}

// -----

module {
func.func @wrong_width(%x: tensor<?x8xf32>, %w1: tensor<8x12xf32>, %w2: tensor<12x8xf32>) -> tensor<?x8xf32> {
  %h = sparsec.linear %x, %w1 : tensor<?x8xf32>, tensor<8x12xf32> -> tensor<?x12xf32>
  %r = sparsec.relu %h : tensor<?x12xf32> loc("/l0/Relu")
  %y = sparsec.linear %r, %w2 : tensor<?x12xf32>, tensor<12x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
}
