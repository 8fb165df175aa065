// RUN: sparsec-opt %s --sparsec-fuse-rotary --canonicalize | FileCheck %s

// The HuggingFace LLaMA export: two slices, neg, concat, x * cos first.
// CHECK-LABEL: func.func @llama_order
// CHECK-SAME: (%[[X:.*]]: tensor<?x2x?x8xf32>, %[[C:.*]]: tensor<?x1x?x8xf32>, %[[S:.*]]: tensor<?x1x?x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = sparsec.rotary %[[X]], %[[C]], %[[S]] : tensor<?x2x?x8xf32>, tensor<?x1x?x8xf32> -> tensor<?x2x?x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @llama_order(%x: tensor<?x2x?x8xf32>, %cos: tensor<?x1x?x8xf32>,
                       %sin: tensor<?x1x?x8xf32>) -> tensor<?x2x?x8xf32> {
  %c0 = sparsec.constant dense<0> : tensor<1xi64>
  %h = sparsec.constant dense<4> : tensor<1xi64>
  %end = sparsec.constant dense<9223372036854775807> : tensor<1xi64>
  %last = sparsec.constant dense<-1> : tensor<1xi64>
  %one = sparsec.constant dense<1> : tensor<1xi64>
  %a = sparsec.slice %x, %c0, %h, %last, %one : (tensor<?x2x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x2x?x4xf32>
  %b = sparsec.slice %x, %h, %end, %last, %one : (tensor<?x2x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x2x?x4xf32>
  %n = sparsec.neg %b : tensor<?x2x?x4xf32>
  %r = sparsec.concat %n, %a {axis = -1 : i64} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>) -> tensor<?x2x?x8xf32>
  %p = sparsec.mul %x, %cos : tensor<?x2x?x8xf32>, tensor<?x1x?x8xf32> -> tensor<?x2x?x8xf32>
  %q = sparsec.mul %r, %sin : tensor<?x2x?x8xf32>, tensor<?x1x?x8xf32> -> tensor<?x2x?x8xf32>
  %y = sparsec.add %p, %q : tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32> -> tensor<?x2x?x8xf32>
  return %y : tensor<?x2x?x8xf32>
}

// Operands swapped everywhere, halves by one split on axis 3, the negation
// a multiplication by -1, and a cos/sin table of rank 2 ([S, D]).
// CHECK-LABEL: func.func @swapped_split
// CHECK-SAME: (%[[X:.*]]: tensor<1x2x5x8xf32>, %[[C:.*]]: tensor<5x8xf32>, %[[S:.*]]: tensor<5x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = sparsec.rotary %[[X]], %[[C]], %[[S]] : tensor<1x2x5x8xf32>, tensor<5x8xf32> -> tensor<1x2x5x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @swapped_split(%x: tensor<1x2x5x8xf32>, %cos: tensor<5x8xf32>,
                         %sin: tensor<5x8xf32>) -> tensor<1x2x5x8xf32> {
  %m1 = sparsec.constant dense<-1.0> : tensor<f32>
  %a, %b = sparsec.split %x {axis = 3 : i64, sizes = array<i64: 4, 4>} : tensor<1x2x5x8xf32> -> tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>
  %n = sparsec.mul %m1, %b : tensor<f32>, tensor<1x2x5x4xf32> -> tensor<1x2x5x4xf32>
  %r = sparsec.concat %n, %a {axis = 3 : i64} : (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x8xf32>
  %q = sparsec.mul %sin, %r : tensor<5x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x2x5x8xf32>
  %p = sparsec.mul %cos, %x : tensor<5x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x2x5x8xf32>
  %y = sparsec.add %q, %p : tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x2x5x8xf32>
  return %y : tensor<1x2x5x8xf32>
}

// The halves still feed another user: the rotary is formed and the
// slices stay for that user.
// CHECK-LABEL: func.func @shared_half
// CHECK: sparsec.slice
// CHECK: %[[Y:.*]] = sparsec.rotary
// CHECK: return %[[Y]], %{{.*}}
func.func @shared_half(%x: tensor<3x8xf32>, %cos: tensor<3x8xf32>,
                       %sin: tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x4xf32>) {
  %c0 = sparsec.constant dense<0> : tensor<1xi64>
  %h = sparsec.constant dense<4> : tensor<1xi64>
  %d = sparsec.constant dense<8> : tensor<1xi64>
  %last = sparsec.constant dense<1> : tensor<1xi64>
  %one = sparsec.constant dense<1> : tensor<1xi64>
  %a = sparsec.slice %x, %c0, %h, %last, %one : (tensor<3x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3x4xf32>
  %b = sparsec.slice %x, %h, %d, %last, %one : (tensor<3x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3x4xf32>
  %n = sparsec.neg %b : tensor<3x4xf32>
  %r = sparsec.concat %n, %a {axis = -1 : i64} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x8xf32>
  %p = sparsec.mul %x, %cos : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  %q = sparsec.mul %r, %sin : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  %y = sparsec.add %p, %q : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  return %y, %b : tensor<3x8xf32>, tensor<3x4xf32>
}

// The halves in the wrong order (x1 negated): this is not rotate_half.
// CHECK-LABEL: func.func @wrong_half_negated
// CHECK-NOT: sparsec.rotary
// CHECK: sparsec.add
func.func @wrong_half_negated(%x: tensor<3x8xf32>, %cos: tensor<3x8xf32>,
                              %sin: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %a, %b = sparsec.split %x {axis = 1 : i64, sizes = array<i64: 4, 4>} : tensor<3x8xf32> -> tensor<3x4xf32>, tensor<3x4xf32>
  %n = sparsec.neg %a : tensor<3x4xf32>
  %r = sparsec.concat %n, %b {axis = -1 : i64} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x8xf32>
  %p = sparsec.mul %x, %cos : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  %q = sparsec.mul %r, %sin : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  %y = sparsec.add %p, %q : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// The halves are of another tensor than the one times cos: not a
// rotation of either.
// CHECK-LABEL: func.func @other_tensor
// CHECK-NOT: sparsec.rotary
func.func @other_tensor(%x: tensor<3x8xf32>, %z: tensor<3x8xf32>,
                        %cos: tensor<3x8xf32>, %sin: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %a, %b = sparsec.split %z {axis = 1 : i64, sizes = array<i64: 4, 4>} : tensor<3x8xf32> -> tensor<3x4xf32>, tensor<3x4xf32>
  %n = sparsec.neg %b : tensor<3x4xf32>
  %r = sparsec.concat %n, %a {axis = -1 : i64} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x8xf32>
  %p = sparsec.mul %x, %cos : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  %q = sparsec.mul %r, %sin : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  %y = sparsec.add %p, %q : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// cos widens x (a [2, 8] table against x [1, 8]): the sum is not x's
// shape, so it stays.
// CHECK-LABEL: func.func @cos_broadcasts_x
// CHECK-NOT: sparsec.rotary
func.func @cos_broadcasts_x(%x: tensor<1x8xf32>, %cos: tensor<2x8xf32>,
                            %sin: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %a, %b = sparsec.split %x {axis = 1 : i64, sizes = array<i64: 4, 4>} : tensor<1x8xf32> -> tensor<1x4xf32>, tensor<1x4xf32>
  %n = sparsec.neg %b : tensor<1x4xf32>
  %r = sparsec.concat %n, %a {axis = -1 : i64} : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x8xf32>
  %p = sparsec.mul %x, %cos : tensor<1x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %q = sparsec.mul %r, %sin : tensor<1x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %y = sparsec.add %p, %q : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
