// RUN: sparsec-opt %s --sparsec-plan-memory -split-input-file -verify-diagnostics

// A value whose non-zero sizes multiply past 2^48 is an error, not a slot sized with an
// overflowing product (2^60 elements of 4 bytes wrap int64).
func.func @huge(%x: tensor<1048576x1048576x1048576xf32>) -> tensor<1048576x1048576x1048576xf32> {
  // expected-error @+1 {{result 0 of type 'tensor<1048576x1048576x1048576xf32>' is too large: its non-zero sizes multiply to more than 2^48}}
  %0 = sparsec.relu %x : tensor<1048576x1048576x1048576xf32>
  return %0 : tensor<1048576x1048576x1048576xf32>
}

// -----

// A zero beside sizes whose product passes 2^48 is refused too: the
// strides would still overflow.
func.func @zero(%x: tensor<0x1048576x1048576x1048576xf32>) -> tensor<0x1048576x1048576x1048576xf32> {
  // expected-error @+1 {{is too large: its non-zero sizes multiply to more than 2^48}}
  %0 = sparsec.relu %x : tensor<0x1048576x1048576x1048576xf32>
  return %0 : tensor<0x1048576x1048576x1048576xf32>
}
